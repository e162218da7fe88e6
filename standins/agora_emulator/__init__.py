"""A strict local stand-in for the Agora Conversational AI REST API and its NCS webhooks.

It implements the contract of ``/work/shared/specs/agora-convoai.md`` (§4, §5, §6 and the behaviour table of
§12) on 127.0.0.1 and rejects what the real service is documented to reject. Where the spec marks behaviour
UNVERIFIED, the choice made here is written down next to the code that makes it. Summary of those choices:

* Auth (spec §2): HTTP Basic with the configured customer ID/secret (scheme case-insensitive), or
  ``Authorization: agora token=<007 token>`` (what Agora's SDK sends by default, with a fresh RTC+RTM token per
  request): the token must be an AccessToken2 of this app ID, signed with the app certificate and not expired.
  Its channel, uid and services are not checked (the SDK signs ``leave`` with a token for channel "stop", uid
  0). Anything else is 401 ``{"detail", "reason": "InvalidPermission"}``.
* An ``{appid}`` in the path other than the emulator's app ID gets 401 ``InvalidPermission`` (the credentials
  are not valid for that project). 401 rather than 404 so a misconfigured app ID can never pass for
  "agent already gone" on ``leave``.
* ``properties.token`` must be a valid ``007`` AccessToken2 or ``006`` token for (channel, agent_rtc_uid) signed
  with the emulator's app certificate and not expired (the token's expiry and its join privilege's), else 400
  ``InvalidFieldValue`` (spec §7.4). With ``advanced_features.enable_rtm: true`` the token must also carry the
  RTM login privilege for the agent's uid, which only ``007`` tokens can.
* A MiniMax TTS preset needs ``tts.params.voice_setting.voice_id`` (every documented preset example sends one):
  without it the join is 400 ``MissingRequiredField``. The ``openai_gpt_5_*`` LLM presets reject
  ``llm.params.max_tokens`` and ``llm.params.temperature`` (those models take neither) with 400. A Deepgram ASR
  preset refuses an ``asr.vendor`` other than ``deepgram`` and an empty or non-string ``asr.params.language``
  (400 ``InvalidFieldValue``); neither field is required, since Agora's Deepgram page documents a preset join
  with only ``asr.language`` (its join examples and the SDK send ``vendor: "deepgram"`` and
  ``params.language``, which the bot sends too).
* ``asr.language`` must be one of the languages Agora documents (``ASR_LANGUAGES``, the SDK's ``AsrLanguage``),
  else 400 ``InvalidFieldValue``. With a Deepgram preset, ``asr.params.language`` must name the same language
  as ``asr.language`` ("es" or "es-ES" with "es-ES"): the docs do not say what Agora does with two different
  languages (UNVERIFIED), so the emulator refuses them, which catches a body whose recognizer and turn detection
  disagree. A MiniMax preset's ``tts.params.language_boost``, when sent, must be one of MiniMax's values
  (``MINIMAX_LANGUAGE_BOOSTS``), and its ``voice_setting.voice_id`` one of the system voices the spec documents
  (``MINIMAX_SYSTEM_VOICES``, §13.2); a Deepgram preset's ``asr.params.language`` one of Agora's documented
  ``asr.language`` tags or the bare language of one (``DEEPGRAM_LANGUAGE_CODES``). Else 400 ``InvalidFieldValue``.
* ``llm.mcp_servers``: each needs a ``name`` of at most 48 English letters and numbers (§13.1) and an http(s)
  ``endpoint``; ``advanced_features.enable_tools`` is a boolean. With both, the agent's custom LLM is offered the
  tools a test serves for those endpoints (:meth:`AgoraEmulator.serve_mcp_tools`) and the engine runs the calls
  the LLM streams back for them, then asks again (``engine_tools``). An answer of tool calls alone is counted as
  one (``LLMTurn.kind``): nothing is spoken and the history gets no empty reply.
* The (*) rule for ``llm``/``tts``: an LLM preset, a non-null ``pipeline_id`` or ``mllm.enable: true`` makes
  ``llm`` optional, otherwise ``llm.url`` is required; a TTS preset, ``pipeline_id`` or ``mllm.enable:
  true`` makes ``tts`` optional, otherwise ``tts.vendor`` (one of the documented vendors) is required.
  ``asr`` is never required. Unknown preset names are rejected.
* ``channel`` longer than 64 bytes is rejected (the RTC channel-name limit; not stated in the ConvoAI docs).
* Names are unique project-wide among agents that are not STOPPED/FAILED.
* The greeting (``llm.greeting_message``, ``{{var}}`` substituted from ``llm.template_variables``) becomes the
  first assistant message when the user joins: call :meth:`AgoraEmulator.user_joined`, or construct with
  ``auto_user_join=True`` to have the user present from the start. If the user never joins, nothing times out.
* ``think`` appends ``{"role": "user", "content": "[think API injected] <text>"}`` to the history (docs
  example); ``speak`` and ``interrupt`` are only recorded.
* History items carry the extra short-term-memory fields ``turn_id``, ``timestamp`` and ``metadata`` (allowed by
  the spec) so clients are tested to ignore unknown fields. History of an agent that is not STARTING/RUNNING is
  404 ``TaskNotFound``.
* ``query`` of a running agent reports ``stop_ts: 0`` and ``message: ""``; stopped agents stay queryable and
  report ``message: "agent exits with reason: <the 102 message>"`` (the docs' query example wraps the reason).
* History is served only while the agent is RUNNING ("Only supports querying the running agent"): a STARTING
  agent gets 404 ``TaskNotFound`` like a stopped one.
* ``/turns`` (spec §4.10, the SDK's ``GetTurnsAgentsResponse``) is derived from the agent's conversation: the
  greeting starts a ``greeting`` turn, a user message from speech (source ``asr``) a ``voice_input`` turn, a
  silence reminder a ``silence_timeout`` turn; the assistant reply after a voice input belongs to its turn. A
  turn ends ``ok`` once spoken, ``interrupted`` (``start_of_speech``) when what it said was cut or the next turn
  began first, ``error`` (``LLM_REQUEST_ERR``) with the LLM's failure message, ``interrupted`` (``api_leave``)
  when the agent stopped before replying. Typed messages, ``think`` and ``speak`` start no listed turn (no
  documented start type fits them). Only ended turns are listed, for running and stopped agents alike; an
  agent stopped more than 7 days ago, or unknown, is 404 ``TaskNotFound``; ``page_size`` outside 10 to 200 or
  ``page_index`` below 1 is 400 ``InvalidFieldValue``; a page past the last is empty.
* ``start_status="STARTING"``: the agent reports STARTING until the user joins or one emulator-clock second
  has passed (checked on each request or :meth:`AgoraEmulator.advance`).
* Custom LLM (``llm.url`` set): :meth:`AgoraEmulator.user_says` plays one user utterance the way ConvoAI does.
  The utterance joins the short-term memory, then the agent POSTs ``llm.params`` + ``messages`` (the system
  messages, then its last ``max_history`` messages, which end with the new user message) + ``stream: true`` to
  ``llm.url`` with ``Authorization: Bearer <llm.api_key>`` (and ``llm.headers``); with ``llm.vendor = "custom"``
  every message carries all of its short-term-memory fields (``turn_id``, ``timestamp``, ``metadata`` with
  ``source``, ``user``, ``interrupted``, ``interrupt_timestamp``, ``original``) and the body also carries
  ``turn_id``, ``timestamp`` (ms), ``interruptable: true``, ``model`` and, when ``llm_context`` is set,
  ``context`` (spec §4.11); ``/history`` and NCS 103 hold the same message fields. The SSE answer is read
  strictly: a non-200 status, a non-event-stream body, an event that is not ``data: <JSON chunk>``, an ``error``
  chunk, or an end without ``data: [DONE]`` is an LLM failure, and the agent says ``llm.failure_message`` (history
  source ``llm_failure``). ``interrupt_after=n`` closes the stream after n content deltas (the user spoke over
  the agent): the history keeps what was spoken (by default every delta received but the last), marked
  interrupted with the received text as ``original``. :meth:`AgoraEmulator.silence_reminder` adds a ``silence`` message.
* Time is ``clock() + offset``; :meth:`AgoraEmulator.advance` moves the offset and fires due timers (idle
  timeout, 72 h cap, NCS 104 thirty seconds before the agent token's join privilege expires).

The package: ``contract`` (credentials, limits, presets), ``agents`` (an agent and its conversation), ``fields`` and
``join_validation`` (request checks), ``rest_api`` (the ConvoAI routes), ``webhooks`` (NCS), ``custom_llm`` (the
agent's LLM client), ``engine_tools`` (the engine as an MCP client), ``turns`` (``/turns``), ``faults`` (injected
failures), ``emulator`` (:class:`AgoraEmulator`, made of those) and ``controls`` (HTTP test controls and
``python -m standins.agora_emulator``).
"""

from standins.agora_emulator.agents import EmulatedAgent, LLMTurn, Message
from standins.agora_emulator.contract import (
    API_PREFIX,
    ASR_LANGUAGES,
    TEST_APP_CERTIFICATE,
    TEST_APP_ID,
    TEST_CUSTOMER_ID,
    TEST_CUSTOMER_SECRET,
    TEST_WEBHOOK_SECRET,
)
from standins.agora_emulator.controls import CONTROL_PREFIX, SDK_PARTS, ControlledAgoraEmulator, main
from standins.agora_emulator.emulator import AgoraEmulator, make_join_properties, running_emulator
from standins.agora_emulator.engine_tools import EngineTool, ToolCall, ToolRun
from standins.agora_emulator.faults import ResponseGate
from standins.agora_emulator.fields import ApiError
from standins.agora_emulator.rest_api import CallRecord, RequestRecord
from standins.agora_emulator.webhooks import NCS_RECEIVER_TIMEOUT_SECONDS, WebhookAttempt

__all__ = [
    "API_PREFIX",
    "ASR_LANGUAGES",
    "CONTROL_PREFIX",
    "NCS_RECEIVER_TIMEOUT_SECONDS",
    "SDK_PARTS",
    "TEST_APP_CERTIFICATE",
    "TEST_APP_ID",
    "TEST_CUSTOMER_ID",
    "TEST_CUSTOMER_SECRET",
    "TEST_WEBHOOK_SECRET",
    "AgoraEmulator",
    "ApiError",
    "CallRecord",
    "ControlledAgoraEmulator",
    "EmulatedAgent",
    "EngineTool",
    "LLMTurn",
    "Message",
    "RequestRecord",
    "ResponseGate",
    "ToolCall",
    "ToolRun",
    "WebhookAttempt",
    "main",
    "make_join_properties",
    "running_emulator",
]
