// Served after agora_sdk_stub.js as the Agora emulator's Web SDK (GET /_emulator/sdk.js, what the call page loads
// in `python3 tasks.py demo`): it links the stub's client to the emulator, as Agora's RTC channel links the
// member's browser to the voice agent. Joining the channel tells the emulator the member is there (the agent
// speaks its greeting and publishes its audio), leaving starts the agent's idle timer, and what the agent says on
// joining reaches the page as a transcript stream message, in the shape Agora's agent sends them.
(function () {
  "use strict";
  const script = document.currentScript;
  const controls = new URL("/_emulator", script ? script.src : location.href).href;
  const stub = window.__agoraStub;
  const createClient = window.AgoraRTC.createClient;
  let turn = 0;

  function post(channel, action, keepalive = false) {
    const url = `${controls}/channels/${encodeURIComponent(channel)}/${action}`;
    return fetch(url, { method: "POST", body: "{}", keepalive, cache: "no-store" })
      .then((res) => (res.ok ? res.json() : null))
      .catch(() => null);
  }

  function caption(uid, text) {
    turn += 1;
    const message = { object: "assistant.transcription", text, turn_id: `emulated-${turn}`, turn_status: 1 };
    return stub.emit("stream-message", uid, JSON.stringify(message));
  }

  window.AgoraRTC.createClient = function (clientConfig) {
    const client = createClient(clientConfig);
    const join = client.join;
    const leave = client.leave;
    let channel = null;
    client.join = async function (appId, name) {
      const uid = await join.apply(this, arguments);
      channel = name;
      const joined = await post(name, "user_joined");
      if (joined) {
        setTimeout(async () => {
          await stub.emit("user-published", Number(joined.agent_uid), "audio");
          for (const text of joined.said) await caption(Number(joined.agent_uid), text);
        }, 0);
      }
      return uid;
    };
    client.leave = async function () {
      const left = channel;
      channel = null;
      if (left !== null) post(left, "user_left", true);
      return leave.apply(this, arguments);
    };
    return client;
  };
})();
