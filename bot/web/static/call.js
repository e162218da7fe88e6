// Call page: joins the Agora RTC channel with the parameters embedded by the server (#call-config),
// publishes the microphone, plays the agent's voice, shows a best-effort live transcript and keeps in
// sync with the bot through /api/calls/<token>/status and /hangup.
// Needs the Agora Web SDK (agora-rtc-sdk-ng 4.24.x, UMD build) loaded before this module: global AgoraRTC.

const $ = (id) => document.getElementById(id);

const ui = {
  status: $("status"),
  dot: $("status-dot"),
  activity: $("activity"),
  timer: $("timer"),
  timerValue: $("timer-value"),
  controls: $("controls"),
  error: $("error"),
  start: $("start"),
  mute: $("mute"),
  end: $("end"),
  enableAudio: $("enable-audio"),
  summary: $("summary"),
  summaryTitle: $("summary-title"),
  summaryTurns: $("summary-turns"),
  summaryFacts: $("summary-facts"),
  summaryFactsRow: $("summary-facts-row"),
  summaryNote: $("summary-note"),
  summaryLearned: $("summary-learned"),
  summaryLearnedList: $("summary-learned-list"),
  footer: $("footer"),
  transcript: $("transcript"),
  transcriptEmpty: $("transcript-empty"),
  transcriptTitle: $("transcript-title"),
  typeForm: $("type-form"),
  typeInput: $("type-input"),
  typeSend: $("type-send"),
};

const cfg = JSON.parse($("call-config").textContent);
// What the page says, in the member's language: the server embeds the page.* texts of its catalogue.
const WORDS = cfg.words || {};
const t = (key, fields = {}) =>
  (WORDS[key] ?? key).replace(/\{(\w+)\}/g, (whole, name) => (Object.hasOwn(fields, name) ? String(fields[name]) : whole));
const linkToken = decodeURIComponent(location.pathname.split("/").filter(Boolean).pop() || "");
const api = {
  status: `/api/calls/${encodeURIComponent(linkToken)}/status`,
  hangup: `/api/calls/${encodeURIComponent(linkToken)}/hangup`,
  token: `/api/calls/${encodeURIComponent(linkToken)}/token`,
};
// The close beacon names this opening of the page, so the bot can tell a reload from a close.
const beaconUrl = `${api.hangup}?via=beacon&page=${encodeURIComponent(cfg.pageId || "")}`;
const pollIntervalMs = Number(cfg.pollIntervalMs) > 0 ? Number(cfg.pollIntervalMs) : 4000;

const STATUS_TEXT = Object.fromEntries(
  ["reconnecting", "disconnected", "connecting", "waiting", "active", "ending", "ended"].map((s) => [s, t(`page.status.${s}`)]),
);

// idle | connecting | waiting | active | ending | ended
let phase = "idle";
let client = null;
let micTrack = null;
let agentUser = null;
let agentPresent = false;
let inChannel = false; // joined or joining: closing the tab must hang up
let muted = false;
let beaconSent = false;
let lastStatus = null;
let pollTimer = null;
let pollInFlight = false;
let clockTimer = null;
let callStartedAt = null;
let expiryTimer = null;

// ---------------------------------------------------------------------------------------------------------
// UI helpers

const SLOW_AGENT_MS = 20000;
let slowAgentTimer = null;

function setPhase(next, text) {
  phase = next;
  ui.status.textContent = text ?? STATUS_TEXT[next] ?? "";
  ui.dot.dataset.state = next;
  if (cfg.typeUrl) {
    ui.typeForm.hidden = !["connecting", "waiting", "active"].includes(next);
    setTypingEnabled(next === "active");
  }
  clearTimeout(slowAgentTimer);
  if (next === "waiting") {
    // Spec pitfall: the agent may take a moment to publish after the bot started it.
    slowAgentTimer = setTimeout(() => {
      if (phase === "waiting") {
        ui.status.textContent = t("page.still_waiting");
      }
    }, SLOW_AGENT_MS);
  }
}

function showError(title, hint) {
  ui.error.replaceChildren();
  for (const line of [title, hint]) {
    if (!line) continue;
    const p = document.createElement("p");
    p.textContent = line;
    ui.error.append(p);
  }
  ui.error.hidden = false;
}

function clearError() {
  ui.error.hidden = true;
  ui.error.replaceChildren();
}

function setActivity(text, speaking = "") {
  ui.activity.textContent = text;
  ui.activity.dataset.speaking = speaking;
  ui.activity.hidden = !text;
}

function formatClock(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  return `${String(Math.floor(s / 60)).padStart(2, "0")}:${String(s % 60).padStart(2, "0")}`;
}

function startClock(alreadyMs = 0) {
  callStartedAt = Date.now() - alreadyMs;
  const limit = Number(cfg.maxMinutes) > 0 ? formatClock(cfg.maxMinutes * 60) : "";
  const tick = () => {
    const elapsed = formatClock((Date.now() - callStartedAt) / 1000);
    ui.timerValue.textContent = limit ? t("page.timer_of", { elapsed, limit }) : elapsed;
  };
  tick();
  ui.timer.hidden = false;
  clockTimer = setInterval(tick, 1000);
}

function stopClock() {
  if (clockTimer !== null) clearInterval(clockTimer);
  clockTimer = null;
}

function focusIfLost(element) {
  const active = document.activeElement;
  if (!active || active === document.body || active.hidden || active.disabled || active.offsetParent === null) {
    element.focus();
  }
}

// Why the call ended, in words; reasons a member caused on this page themselves need no explanation, and
// unknown ones are not shown (never an internal code).
const END_REASONS = {
  hangup: t("page.reason.hangup"),
  hangup_button: t("page.reason.hangup"),
  page_closed: t("page.reason.page_closed"),
  idle_timeout: t("page.reason.idle_timeout"),
  max_duration: t("page.reason.time_limit"),
  agent_lifetime: t("page.reason.time_limit"),
  agent_failed: t("page.reason.agent_failed"),
  agent_stopped: t("page.reason.agent_stopped"),
  start_failed: t("page.reason.start_failed"),
};

function endReasonText(reason) {
  return Object.hasOwn(END_REASONS, reason) ? END_REASONS[reason] : "";
}

// ---------------------------------------------------------------------------------------------------------
// Errors → short human messages

function describeError(err, stage) {
  const code = `${err?.code ?? ""} ${err?.name ?? ""} ${err?.message ?? ""}`;
  if (stage === "sdk") {
    return [t("page.error.sdk"), t("page.error.sdk_hint")];
  }
  if (stage === "mic") {
    if (!window.isSecureContext) {
      return [t("page.error.insecure"), t("page.error.insecure_hint")];
    }
    if (/PERMISSION_DENIED|NotAllowed|SecurityError|Permission/i.test(code)) {
      return [t("page.error.blocked"), t("page.error.blocked_hint")];
    }
    if (/DEVICE_NOT_FOUND|NotFound|Overconstrained/i.test(code)) {
      return [t("page.error.no_mic"), t("page.error.no_mic_hint")];
    }
    if (/NOT_READABLE|NotReadable|TrackStart/i.test(code)) {
      return [t("page.error.busy"), t("page.error.busy_hint")];
    }
    return [t("page.error.mic"), t("page.error.mic_hint")];
  }
  if (/expired|invalid.?token|DYNAMIC_KEY|INVALID_VENDOR_KEY/i.test(code)) {
    return [t("page.error.expired"), t("page.error.expired_hint")];
  }
  return [t("page.error.connect"), t("page.error.connect_hint")];
}

// ---------------------------------------------------------------------------------------------------------
// Server API

async function fetchStatus() {
  try {
    const res = await fetch(api.status, { cache: "no-store", credentials: "same-origin" });
    if (res.status === 404) return { state: "ended", end_reason: null, turns_stored: 0, facts_learned: null, gone: true };
    if (!res.ok) return null;
    return await res.json();
  } catch {
    return null;
  }
}

async function fetchFreshToken() {
  try {
    const res = await fetch(api.token, { method: "POST", cache: "no-store", credentials: "same-origin" });
    if (!res.ok) return null;
    return (await res.json()).token || null;
  } catch {
    return null;
  }
}

async function postHangup() {
  const res = await fetch(api.hangup, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ via: "page" }),
    keepalive: true,
    cache: "no-store",
    credentials: "same-origin",
  });
  if (!res.ok) return null;
  return await res.json();
}

function sendHangupBeacon() {
  if (beaconSent) return;
  beaconSent = true;
  const body = new Blob(["beacon"], { type: "text/plain" });
  let queued = false;
  try {
    queued = typeof navigator.sendBeacon === "function" && navigator.sendBeacon(beaconUrl, body);
  } catch {
    queued = false;
  }
  if (!queued) {
    fetch(beaconUrl, { method: "POST", body, keepalive: true }).catch(() => {});
  }
}

// ---------------------------------------------------------------------------------------------------------
// Status polling: notices calls ended elsewhere (Discord, idle timeout, time limit)

function startPolling() {
  if (pollTimer === null) pollTimer = setInterval(pollOnce, pollIntervalMs);
}

function stopPolling() {
  if (pollTimer !== null) clearInterval(pollTimer);
  pollTimer = null;
}

// What the member asked the agent to remember in this call (its memory tools), as the bot reports it: each new
// fact shows as remembered, and one that disappears as forgotten.
const rememberedShown = new Set();

function showMemoryChanges(texts) {
  const now = new Set(texts.filter((text) => typeof text === "string" && text.trim() !== ""));
  for (const text of now) {
    if (rememberedShown.has(text)) continue;
    rememberedShown.add(text);
    upsertTurn("memory", `+${text}`, t("page.remembered", { text }));
  }
  for (const text of [...rememberedShown]) {
    if (now.has(text)) continue;
    rememberedShown.delete(text);
    upsertTurn("memory", `-${text}`, t("page.forgotten", { text }));
  }
}

async function pollOnce() {
  if (pollInFlight || phase === "ending" || phase === "ended") return;
  pollInFlight = true;
  try {
    const status = await fetchStatus();
    if (!status || phase === "ending" || phase === "ended") return;
    lastStatus = status;
    showMemoryChanges(Array.isArray(status.remembered) ? status.remembered : []);
    if (status.state === "ended" || status.state === "failed") {
      await endedElsewhere(status);
    }
  } finally {
    pollInFlight = false;
  }
}

// ---------------------------------------------------------------------------------------------------------
// Live transcript (stream-message chunks: message_id|part_idx|part_sum|base64(json)); best effort

const pendingChunks = new Map();
const turnItems = new Map();
const MAX_TRANSCRIPT_ITEMS = 100;
const decoder = new TextDecoder();

function decodeBase64Utf8(b64) {
  const binary = atob(b64);
  const bytes = new Uint8Array(binary.length);
  for (let i = 0; i < binary.length; i += 1) bytes[i] = binary.charCodeAt(i);
  return decoder.decode(bytes);
}

function handleStreamMessage(_uid, payload) {
  try {
    const text = typeof payload === "string" ? payload : decoder.decode(payload);
    if (text.trimStart().startsWith("{")) {
      handleAgentMessage(JSON.parse(text));
      return;
    }
    const parts = text.split("|");
    if (parts.length < 4) return;
    const [messageId, partIdx, partSum] = parts;
    const data = parts.slice(3).join("|");
    const index = Number.parseInt(partIdx, 10);
    const total = Number.parseInt(partSum, 10); // NaN for "???" (unknown yet)
    if (!messageId || !(index >= 1)) return;
    let entry = pendingChunks.get(messageId);
    if (!entry) {
      entry = { parts: new Map(), total: null, at: Date.now() };
      pendingChunks.set(messageId, entry);
    }
    if (total >= 1) entry.total = total;
    entry.parts.set(index, data);
    if (entry.total !== null && entry.parts.size >= entry.total) {
      pendingChunks.delete(messageId);
      let b64 = "";
      for (let i = 1; i <= entry.total; i += 1) {
        if (!entry.parts.has(i)) return;
        b64 += entry.parts.get(i);
      }
      handleAgentMessage(JSON.parse(decodeBase64Utf8(b64)));
    }
    prunePendingChunks();
  } catch {
    // Malformed or partial messages are dropped: the transcript is optional.
  }
}

function prunePendingChunks() {
  const cutoff = Date.now() - 30000;
  for (const [id, entry] of pendingChunks) {
    if (entry.at < cutoff || pendingChunks.size > 200) pendingChunks.delete(id);
  }
}

function handleAgentMessage(msg) {
  if (!msg || typeof msg !== "object") return;
  if (msg.object === "user.transcription") {
    upsertTurn("user", msg.turn_id, msg.text, { final: msg.final !== false });
  } else if (msg.object === "assistant.transcription") {
    upsertTurn("assistant", msg.turn_id, msg.text, {
      final: msg.turn_status !== 0,
      interrupted: msg.turn_status === 2,
    });
  } else if (msg.object === "message.interrupt") {
    const item = turnItems.get(`assistant:${msg.turn_id}`);
    if (item) markInterrupted(item);
  }
}

function markInterrupted(item) {
  if (item.querySelector(".flag")) return;
  const flag = document.createElement("span");
  flag.className = "flag";
  flag.textContent = t("page.interrupted");
  item.append(flag);
}

function upsertTurn(role, turnId, text, { final = true, interrupted = false } = {}) {
  if (typeof text !== "string" || text.trim() === "") return;
  const key = `${role}:${turnId ?? "?"}`;
  let item = turnItems.get(key);
  const list = ui.transcript;
  const nearBottom = list.scrollHeight - list.scrollTop - list.clientHeight < 40;
  if (!item) {
    item = document.createElement("li");
    item.dataset.role = role;
    const who = document.createElement("span");
    who.className = "who";
    who.textContent = t(role === "user" ? "page.who.user" : role === "memory" ? "page.who.memory" : "page.who.agent");
    const body = document.createElement("span");
    body.className = "text";
    item.append(who, body);
    list.append(item);
    turnItems.set(key, item);
    while (list.children.length > MAX_TRANSCRIPT_ITEMS) {
      const oldest = list.firstElementChild;
      for (const [k, v] of turnItems) if (v === oldest) turnItems.delete(k);
      oldest.remove();
    }
    ui.transcriptEmpty.hidden = true;
  }
  item.querySelector(".text").textContent = text;
  item.dataset.final = String(final);
  if (interrupted) markInterrupted(item);
  if (nearBottom) list.scrollTop = list.scrollHeight;
}

// ---------------------------------------------------------------------------------------------------------
// "Type instead of speaking": only when the bot runs against the local Agora emulator (agora.emulator, which
// `python3 tasks.py demo` sets and the bot refuses unless Agora's address is on loopback). Each line goes to the
// emulator, whose agent hears it as the member's speech and answers through the bot's own LLM route.

let typing = false;
let typedLines = 0;

function setTypingEnabled(enabled) {
  const on = enabled && !typing;
  ui.typeInput.disabled = !on;
  ui.typeSend.disabled = !on;
}

async function sayTyped(event) {
  event.preventDefault();
  const text = ui.typeInput.value.trim();
  if (!text || typing || phase !== "active") return;
  typing = true;
  setTypingEnabled(false);
  ui.typeInput.value = "";
  typedLines += 1;
  const turn = `typed-${typedLines}`;
  upsertTurn("user", turn, text);
  try {
    // A plain-text body keeps this a CORS "simple" request: the emulator is another origin on this machine.
    const res = await fetch(cfg.typeUrl, { method: "POST", body: JSON.stringify({ text }), cache: "no-store" });
    const answer = res.ok ? await res.json() : null;
    if (!answer || !Array.isArray(answer.said)) throw new Error(`HTTP ${res.status}`);
    answer.said.forEach((line, i) => upsertTurn("assistant", `${turn}-${i}`, String(line)));
  } catch {
    showError(t("page.error.typed"), t("page.error.typed_hint"));
  } finally {
    typing = false;
    setTypingEnabled(phase === "active");
    if (phase === "active") ui.typeInput.focus();
  }
}

// ---------------------------------------------------------------------------------------------------------
// Agora client

const isAgent = (uid) => String(uid) === String(cfg.agentUid);

function registerHandlers(rtc) {
  rtc.on("user-published", async (user, mediaType) => {
    if (!isAgent(user.uid) || mediaType !== "audio") return;
    if (phase === "ending" || phase === "ended" || rtc !== client) return;
    try {
      const track = await rtc.subscribe(user, "audio");
      if (rtc !== client) return;
      agentUser = user;
      agentPresent = true;
      (user.audioTrack ?? track)?.play();
      if (phase === "connecting" || phase === "waiting") setPhase("active");
    } catch {
      showError(t("page.error.audio"), t("page.error.audio_hint"));
    }
  });
  rtc.on("user-unpublished", (user, mediaType) => {
    if (isAgent(user.uid) && mediaType === "audio" && phase === "active") setActivity(t("page.activity.no_audio"));
  });
  rtc.on("user-left", (user) => {
    if (isAgent(user.uid) && rtc === client) endedElsewhere(null, { agentLeft: true });
  });
  rtc.on("stream-message", handleStreamMessage);
  rtc.on("volume-indicator", (volumes) => {
    if (phase !== "active" || !Array.isArray(volumes)) return;
    let agentLevel = 0;
    let userLevel = 0;
    for (const v of volumes) {
      if (isAgent(v.uid)) agentLevel = v.level;
      else if (String(v.uid) === String(cfg.uid) || v.uid === 0) userLevel = v.level;
    }
    if (agentLevel > 5) setActivity(t("page.activity.speaking"), "agent");
    else if (muted) setActivity(t("page.activity.muted"));
    else if (userLevel > 5) setActivity(t("page.activity.hearing"), "user");
    else setActivity(t("page.activity.listening"));
  });
  rtc.on("connection-state-change", (current, previous, reason) => {
    if (rtc !== client || phase === "ending" || phase === "ended") return;
    if (current === "RECONNECTING") {
      ui.status.textContent = STATUS_TEXT.reconnecting; // the SDK keeps trying on its own
    } else if (current === "CONNECTED" && previous === "RECONNECTING") {
      setPhase(phase);
    } else if (current === "DISCONNECTED" && reason && reason !== "LEAVE") {
      connectionLost();
    }
  });
  // Agora tokens last at most a day; a longer call gets a fresh one from the bot shortly before it runs out.
  rtc.on("token-privilege-will-expire", async () => {
    if (rtc !== client) return;
    const token = await fetchFreshToken();
    if (token && rtc === client) await rtc.renewToken(token);
  });
  rtc.on("token-privilege-did-expire", () => {
    if (rtc === client) hangUp({ message: t("page.access_expired") });
  });
}

// The SDK gave up reconnecting. The call keeps running (the agent waits until its idle timeout): offer Rejoin
// for as long as the bot says it is running; the status poll notices when it ends.
async function connectionLost() {
  await leaveChannel();
  agentPresent = false;
  setPhase("idle", STATUS_TEXT.disconnected);
  setActivity("");
  showError(
    t("page.error.lost"),
    t("page.error.lost_hint"),
  );
  ui.mute.hidden = true;
  ui.end.hidden = true;
  ui.start.textContent = t("page.rejoin");
  ui.start.hidden = false;
  ui.start.disabled = false;
  focusIfLost(ui.start);
  startPolling();
}

async function startCall() {
  if (phase !== "idle" || ui.start.disabled) return;
  clearError();
  const AgoraRTC = window.AgoraRTC;
  if (!AgoraRTC || typeof AgoraRTC.createClient !== "function") {
    showError(...describeError(null, "sdk"));
    return;
  }
  ui.start.disabled = true;
  setPhase("connecting");
  try {
    AgoraRTC.setLogLevel?.(3);
  } catch {
    // logging level is cosmetic
  }
  AgoraRTC.onAutoplayFailed = () => {
    ui.enableAudio.hidden = false;
  };

  const rtc = AgoraRTC.createClient({ mode: "rtc", codec: "vp8" });
  client = rtc;
  registerHandlers(rtc);
  inChannel = true;
  try {
    await rtc.join(cfg.appId, cfg.channel, cfg.token, Number(cfg.uid));
  } catch (err) {
    await failStart(describeError(err, "join"));
    return;
  }
  if (rtc !== client) return; // ended while joining
  let track;
  try {
    track = await AgoraRTC.createMicrophoneAudioTrack();
  } catch (err) {
    await failStart(describeError(err, "mic"));
    return;
  }
  if (rtc !== client) {
    track.close();
    return;
  }
  micTrack = track;
  try {
    await rtc.publish([track]);
  } catch (err) {
    await failStart(describeError(err, "join"));
    return;
  }
  if (rtc !== client) return;
  if (phase === "connecting") setPhase(agentPresent ? "active" : "waiting");
  try {
    rtc.enableAudioVolumeIndicator?.();
  } catch {
    // optional
  }
  ui.start.hidden = true;
  ui.start.disabled = false;
  ui.mute.hidden = false;
  ui.end.hidden = false;
  if (callStartedAt === null) startClock();
  focusIfLost(ui.end);
}

async function failStart([title, hint]) {
  await leaveChannel();
  agentPresent = false;
  setPhase("idle", t("page.not_connected"));
  showError(title, hint);
  ui.start.disabled = false;
  ui.start.hidden = false;
  ui.start.focus();
}

async function leaveChannel() {
  const track = micTrack;
  const rtc = client;
  micTrack = null;
  client = null;
  inChannel = false;
  try {
    track?.close();
  } catch {
    // already closed
  }
  if (rtc) {
    try {
      await rtc.leave();
    } catch {
      // already left
    }
  }
}

async function toggleMute() {
  if (!micTrack) return;
  const next = !muted;
  ui.mute.disabled = true;
  try {
    await micTrack.setEnabled(!next);
    muted = next;
    ui.mute.setAttribute("aria-pressed", String(muted));
    setActivity(muted ? t("page.activity.muted") : "");
  } catch {
    showError(t("page.error.mute"), t("page.error.mute_hint"));
  } finally {
    ui.mute.disabled = false;
  }
}

// The user ends the call (End call button) or the connection is lost.
async function hangUp({ message } = {}) {
  if (phase === "ending" || phase === "ended") return;
  setPhase("ending");
  ui.mute.disabled = true;
  ui.end.disabled = true;
  stopPolling();
  const request = postHangup().then(
    (status) => ({ status, reached: status !== null }),
    () => ({ status: null, reached: false }),
  );
  await leaveChannel();
  const { status, reached } = await request;
  finish(status ?? lastStatus, { reached, message });
}

// The call ended without the user pressing End call: status poll, agent left, link gone.
async function endedElsewhere(status, { agentLeft = false } = {}) {
  if (phase === "ending" || phase === "ended") return;
  setPhase("ending");
  stopPolling();
  await leaveChannel();
  let final = status;
  if (agentLeft) {
    final = await fetchStatus();
    if (final && (final.state === "starting" || final.state === "active")) {
      // The agent left but the bot still thinks the call runs: tell it, so it can wrap up.
      final = await postHangup().catch(() => null);
    }
  }
  finish(final ?? lastStatus, {
    reached: true,
    message: agentLeft && !final?.end_reason ? t("page.agent_left") : undefined,
  });
}

function finish(status, { reached = true, message } = {}) {
  setPhase("ended");
  stopClock();
  stopPolling();
  clearTimeout(expiryTimer);
  clearError();
  ui.timer.hidden = true;
  setActivity("");
  ui.start.hidden = true;
  ui.mute.hidden = true;
  ui.end.hidden = true;
  ui.enableAudio.hidden = true;
  ui.controls.hidden = true;
  ui.footer.hidden = true; // "Closing this tab ends the call" no longer applies
  ui.summary.hidden = false;
  showTranscriptAfterTheCall();
  const notes = [];
  const reason = endReasonText(status?.end_reason);
  if (reason) notes.push(reason);
  else if (message) notes.push(message);
  if (status?.state === "failed" && !reason) notes.push(t("page.failed_note"));
  if (!reached) notes.push(t("page.unreached"));
  ui.summaryNote.textContent = notes.join(" ");
  renderSummary(status);
  ui.summaryTitle.tabIndex = -1;
  focusIfLost(ui.summaryTitle);
  if (status && !status.gone && status.facts_learned == null && nothingSaid(status) === false) waitForFacts();
}

// True when the call kept no line at all: then there is nothing to learn from and nothing to wait for.
function nothingSaid(status) {
  return !(status && Number(status.turns_stored) > 0);
}

function renderSummary(status) {
  ui.summaryTurns.textContent = status && Number.isFinite(status.turns_stored) ? String(status.turns_stored) : "–";
  ui.summaryLearned.hidden = true;
  if (status && status.facts_learned != null && !nothingSaid(status)) {
    ui.summaryFacts.textContent = String(status.facts_learned);
    ui.summaryFactsRow.hidden = false;
    renderLearned(Array.isArray(status.facts) ? status.facts : []);
  } else if (status && !status.gone && !nothingSaid(status)) {
    ui.summaryFacts.textContent = t("page.processing");
    ui.summaryFactsRow.hidden = false;
  } else {
    ui.summaryFactsRow.hidden = true;
  }
}

function renderLearned(facts) {
  ui.summaryLearnedList.replaceChildren(
    ...facts.map((text) => {
      const item = document.createElement("li");
      item.textContent = String(text);
      return item;
    }),
  );
  ui.summaryLearned.hidden = facts.length === 0;
}

// After the call, post-call processing may still be running: check a few more times for facts_learned.
async function waitForFacts() {
  for (let attempt = 0; attempt < 20; attempt += 1) {
    await new Promise((resolve) => setTimeout(resolve, pollIntervalMs));
    const status = await fetchStatus();
    if (!status || status.gone) break;
    if (status.facts_learned != null) {
      renderSummary(status);
      return;
    }
  }
  ui.summaryFactsRow.hidden = true; // memory is off or processing is taking long: nothing to show
}

// ---------------------------------------------------------------------------------------------------------
// Wiring

ui.start.addEventListener("click", startCall);
if (cfg.typeUrl) ui.typeForm.addEventListener("submit", sayTyped);
ui.mute.addEventListener("click", toggleMute);
ui.end.addEventListener("click", () => hangUp());
ui.enableAudio.addEventListener("click", () => {
  try {
    agentUser?.audioTrack?.play();
  } finally {
    ui.enableAudio.hidden = true;
  }
});

window.addEventListener("pagehide", () => {
  if (!inChannel || phase === "ending" || phase === "ended") return;
  sendHangupBeacon();
  const track = micTrack;
  const rtc = client;
  try {
    track?.close();
    rtc?.leave();
  } catch {
    // the page is going away anyway
  }
});

// A reload (or the link opened again) in the browser that holds the call: the call kept running meanwhile.
async function restoreRunningCall() {
  const rejoinSeconds = Number(cfg.rejoinSeconds) || 0;
  const ends = rejoinSeconds > 0 ? ` ${t("page.still_running_ends", { seconds: rejoinSeconds })}` : "";
  setPhase("idle", `${t("page.still_running")}${ends}`);
  ui.start.textContent = t("page.rejoin");
  startClock(Math.max(0, Number(cfg.elapsedSeconds) || 0) * 1000);
  try {
    const res = await fetch(`${api.status}?transcript=1`, { cache: "no-store", credentials: "same-origin" });
    const status = res.ok ? await res.json() : null;
    const lines = Array.isArray(status?.lines) ? status.lines : [];
    lines.forEach((line, i) => upsertTurn(line.role === "user" ? "user" : "assistant", `stored-${i}`, line.text));
  } catch {
    // the transcript is best effort; the call itself can still be rejoined
  }
}

function showTranscriptAfterTheCall() {
  ui.transcript.closest("section").hidden = ui.transcript.children.length === 0;
  ui.transcriptTitle.textContent = t("page.transcript");
}

// The Start button works only with the voice component loaded and while the link is valid.

function linkExpired() {
  if (phase !== "idle" || callStartedAt !== null) return; // a call already started can still be rejoined
  ui.start.disabled = true;
  showError(t("page.error.expired"), t("page.error.expired_hint"));
}

if (cfg.reopened && (cfg.state === "active" || cfg.state === "starting")) restoreRunningCall();
if (!window.AgoraRTC) {
  ui.start.disabled = true;
  showError(...describeError(null, "sdk"));
}
const expiresAt = Date.parse(cfg.expiresAt);
if (Number.isFinite(expiresAt)) {
  const left = expiresAt - Date.now();
  if (left <= 0) linkExpired();
  else if (left < 2 ** 31 - 1) expiryTimer = setTimeout(linkExpired, left);
}
if (cfg.state === "ending") {
  ui.start.disabled = true;
  setPhase("idle", t("page.ending"));
}
startPolling();
