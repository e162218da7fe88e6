// A stand-in for the Agora Web SDK UMD build (agora-rtc-sdk-ng 4.24.x): defines the global `AgoraRTC`.
// Every API call is recorded in window.__agoraCalls as {name, args} with JSON-friendly args
// (tracks -> {track: "<id>"}, remote users -> {uid}, Uint8Array -> {bytes: n}).
// Tests drive remote events through window.__agoraStub.emit(event, ...args) and configure failures with
// window.__agoraStubConfig = {joinError: {code, message}, micError: {code, name, message}, publishError} set
// before this script runs (e.g. via page.add_init_script).
(function () {
  "use strict";
  const config = window.__agoraStubConfig || {};
  const calls = [];
  window.__agoraCalls = calls;
  const clients = [];
  const remoteUsers = new Map();
  let trackCounter = 0;

  function sanitize(value) {
    if (value === null || value === undefined) return value ?? null;
    if (value instanceof Uint8Array) return { bytes: value.length };
    if (Array.isArray(value)) return value.map(sanitize);
    if (typeof value === "function") return "[function]";
    if (typeof value === "object") {
      if (value.__stubTrackId) return { track: value.__stubTrackId };
      if (value.__stubRemoteUser) return { uid: value.uid };
      const out = {};
      for (const [k, v] of Object.entries(value)) out[k] = sanitize(v);
      return out;
    }
    return value;
  }

  function record(name, args) {
    calls.push({ name, args: Array.from(args, sanitize) });
  }

  function makeError(spec, fallbackCode) {
    const err = new Error(spec.message || spec.code || fallbackCode);
    err.name = spec.name || "AgoraRTCException";
    err.code = spec.code || fallbackCode;
    return err;
  }

  function LocalAudioTrack() {
    trackCounter += 1;
    this.__stubTrackId = `mic-${trackCounter}`;
    this.trackMediaType = "audio";
    this.enabled = true;
    this.muted = false;
    this.closed = false;
  }
  LocalAudioTrack.prototype.setEnabled = async function (enabled) {
    record("track.setEnabled", [this, enabled]);
    this.enabled = enabled;
  };
  LocalAudioTrack.prototype.setMuted = async function (muted) {
    record("track.setMuted", [this, muted]);
    this.muted = muted;
  };
  LocalAudioTrack.prototype.close = function () {
    record("track.close", [this]);
    this.closed = true;
  };
  LocalAudioTrack.prototype.play = function () {
    record("track.play", [this]);
  };
  LocalAudioTrack.prototype.getVolumeLevel = function () {
    return 0.5;
  };

  function RemoteAudioTrack(uid) {
    this.__stubTrackId = `remote-audio-${uid}`;
    this.trackMediaType = "audio";
    this.isPlaying = false;
  }
  RemoteAudioTrack.prototype.play = function () {
    record("remoteTrack.play", [this]);
    this.isPlaying = true;
  };
  RemoteAudioTrack.prototype.stop = function () {
    record("remoteTrack.stop", [this]);
    this.isPlaying = false;
  };
  RemoteAudioTrack.prototype.setVolume = function (volume) {
    record("remoteTrack.setVolume", [this, volume]);
  };

  function remoteUser(uid) {
    if (!remoteUsers.has(uid)) {
      remoteUsers.set(uid, { __stubRemoteUser: true, uid, hasAudio: false, hasVideo: false, audioTrack: undefined });
    }
    return remoteUsers.get(uid);
  }

  function createClient(clientConfig) {
    record("createClient", [clientConfig]);
    const handlers = new Map();
    const client = {
      connectionState: "DISCONNECTED",
      uid: undefined,
      remoteUsers: [],
      on(event, handler) {
        record("on", [event]);
        if (!handlers.has(event)) handlers.set(event, []);
        handlers.get(event).push(handler);
      },
      off(event, handler) {
        record("off", [event]);
        const list = handlers.get(event) || [];
        handlers.set(event, list.filter((h) => h !== handler));
      },
      removeAllListeners(event) {
        record("removeAllListeners", [event]);
        if (event) handlers.delete(event);
        else handlers.clear();
      },
      async join(appId, channel, token, uid) {
        record("join", arguments);
        if (config.joinError) throw makeError(config.joinError, "CAN_NOT_GET_GATEWAY_SERVER");
        this.connectionState = "CONNECTED";
        this.uid = uid ?? 424242;
        return this.uid;
      },
      async leave() {
        record("leave", arguments);
        this.connectionState = "DISCONNECTED";
      },
      async publish(tracks) {
        record("publish", arguments);
        if (config.publishError) throw makeError(config.publishError, "PUBLISH_FAILED");
      },
      async unpublish(tracks) {
        record("unpublish", arguments);
      },
      async subscribe(user, mediaType) {
        record("subscribe", arguments);
        if (mediaType === "audio") {
          user.audioTrack = user.audioTrack || new RemoteAudioTrack(user.uid);
          return user.audioTrack;
        }
        return undefined;
      },
      async unsubscribe(user, mediaType) {
        record("unsubscribe", arguments);
      },
      enableAudioVolumeIndicator() {
        record("enableAudioVolumeIndicator", arguments);
      },
      async renewToken(token) {
        record("renewToken", arguments);
      },
      __emit(event, args) {
        const list = handlers.get(event) || [];
        return Promise.all(list.map((handler) => Promise.resolve().then(() => handler(...args))));
      },
    };
    clients.push(client);
    return client;
  }

  window.AgoraRTC = {
    VERSION: "4.24.8-stub",
    onAutoplayFailed: undefined,
    createClient,
    async createMicrophoneAudioTrack(trackConfig) {
      record("createMicrophoneAudioTrack", arguments);
      if (config.micError) throw makeError(config.micError, "PERMISSION_DENIED");
      return new LocalAudioTrack();
    },
    setLogLevel(level) {
      record("setLogLevel", arguments);
    },
    checkSystemRequirements() {
      return true;
    },
    async getMicrophones() {
      return [{ deviceId: "default", kind: "audioinput", label: "Stub microphone" }];
    },
  };

  // Test hooks.
  window.__agoraStub = {
    get clients() {
      return clients;
    },
    get client() {
      return clients[clients.length - 1] || null;
    },
    remoteUser,
    // emit("user-published", uid | user, "audio"), emit("user-left", uid, "Quit"),
    // emit("stream-message", uid, Uint8Array | string): numeric/string uids of user events become the
    // shared remote user object; string stream-message payloads become UTF-8 Uint8Arrays.
    emit(event, ...args) {
      const client = this.client;
      if (!client) throw new Error("no AgoraRTC client created yet");
      let mapped = args;
      if (["user-published", "user-unpublished", "user-joined", "user-left", "user-info-updated"].includes(event)) {
        const user = typeof args[0] === "object" && args[0] !== null ? args[0] : remoteUser(args[0]);
        if (event === "user-published" && args[1] === "audio") user.hasAudio = true;
        mapped = [user, ...args.slice(1)];
      } else if (event === "stream-message" && typeof args[1] === "string") {
        mapped = [args[0], new TextEncoder().encode(args[1])];
      }
      return client.__emit(event, mapped).then(() => true);
    },
    calls(name) {
      return calls.filter((c) => c.name === name);
    },
  };
})();
