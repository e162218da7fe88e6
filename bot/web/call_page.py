"""The call page: its HTML with the join parameters embedded, its content security policy, the browser cookie that
binds a link to the browser that opened it first, and the pages for a link that is no longer valid, a call that
ended or one open in another browser. Every page is in the language its link asks for (``?lang=``, the member's
Discord language, added by the call card), from the ``page.*`` texts of ``bot.i18n``; the call page's script gets
its texts in the page's configuration."""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote, urlsplit

from aiohttp import web

from bot.i18n import Words, words_for
from bot.web.backend import PAGE_STATES, CallPageBackend, OpenElsewhere, PageSession

STATIC_DIR = Path(__file__).resolve().parent / "static"
MAX_TOKEN_LENGTH = 128


DEFAULT_STATUS_POLL_INTERVAL = 4.0


_TOKEN_RE = re.compile(r"[A-Za-z0-9_-]+={0,2}")


_LINK_PREVIEW_UA = re.compile(
    r"discordbot|slackbot|twitterbot|facebookexternalhit|telegrambot|whatsapp|linkedinbot|skypeuripreview"
    r"|embedly|googlebot|bingbot",
    re.IGNORECASE,
)


_PLACEHOLDER_RE = re.compile(r"\{\{([A-Z_]+)\}\}")


_WORDS_RE = re.compile(r"\{\{(page\.[a-z_.]+)\}\}")


BROWSER_COOKIE = "memcall_browser"


BROWSER_COOKIE_MAX_AGE = 30 * 86400


def is_valid_link_token(token: str) -> bool:
    """URL-safe base64 (optionally padded), 1..128 characters."""
    return 0 < len(token) <= MAX_TOKEN_LENGTH and _TOKEN_RE.fullmatch(token) is not None


@dataclass(frozen=True)
class PageSettings:
    sdk_url: str
    public_url: str
    public_origin: str
    csp: str
    call_template: str
    notice_html: str
    preview_html: str
    status_poll_interval: float
    emulator_controls_url: str | None = None


BACKEND_KEY = web.AppKey("call_page_backend", CallPageBackend)


SETTINGS_KEY = web.AppKey("call_page_settings", PageSettings)


PREVIEW_HTML = """<!doctype html>
<html lang="{{page.lang}}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>{{page.title}}</title>
<meta property="og:title" content="{{page.title}}">
<meta property="og:description" content="{{page.preview}}">
</head>
<body><p>{{page.preview}}</p></body>
</html>
"""


def origin_of(url: str) -> str | None:
    parts = urlsplit(url)
    if not parts.scheme and not parts.netloc:
        return None  # a same-origin path such as /static/vendor/AgoraRTC.js
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"unsupported URL {url!r}: expected http(s)://host/...")
    return f"{parts.scheme}://{parts.netloc}".lower()


def build_csp(sdk_url: str, emulator_controls_url: str | None = None) -> str:
    sdk_origin = origin_of(sdk_url)
    extra = f" {sdk_origin}" if sdk_origin else ""
    emulator_origin = origin_of(emulator_controls_url) if emulator_controls_url else None
    connect_extra = extra + (f" {emulator_origin}" if emulator_origin and emulator_origin != sdk_origin else "")
    return "; ".join(
        [
            "default-src 'self'",
            f"script-src 'self'{extra}",
            "style-src 'self'",
            "img-src 'self' data: blob:",
            "media-src 'self' blob: mediastream:",
            # The Agora SDK talks to many edge servers (https + wss) chosen at run time.
            f"connect-src 'self' https: wss:{connect_extra}",
            "worker-src 'self' blob:",
            "object-src 'none'",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )


def page_words(request: web.Request) -> Words:
    """The language a page is shown in: the link's ``lang``, else English."""
    return words_for(request.query.get("lang"))


def in_words(template: str, words: Words) -> str:
    """A page template with its ``{{page.*}}`` texts in ``words``' language: escaped, except the keys ending in
    ``_html``, which hold the catalogue's own markup (``<code>``, ``<strong>``)."""

    def text(match: re.Match[str]) -> str:
        key = match.group(1)
        found = words.text(key)
        return found if key.endswith("_html") else html.escape(found, quote=True)

    return _WORDS_RE.sub(text, template)


def _html_page(request: web.Request, template: str, status: int = 200) -> web.Response:
    body = in_words(template, page_words(request))
    return web.Response(status=status, text=body, content_type="text/html", charset="utf-8")


def _notice(request: web.Request, kind: str, status: int) -> web.Response:
    """One of the short pages instead of a call (``page.<kind>.*``: ``invalid`` link, call ``ended``, open
    ``elsewhere``): a title, a heading and two lines, whose ``_html`` texts hold the catalogue's own markup."""
    words = page_words(request)
    values = {
        "TITLE": html.escape(words.text(f"page.{kind}.title")),
        "HEADING": html.escape(words.text(f"page.{kind}.heading")),
        "FIRST": words.text(f"page.{kind}.first_html"),
        "SECOND": words.text(f"page.{kind}.second_html"),
    }
    page = _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), request.app[SETTINGS_KEY].notice_html)
    return web.Response(status=status, text=in_words(page, words), content_type="text/html", charset="utf-8")


def _invalid_page(request: web.Request) -> web.Response:
    return _notice(request, "invalid", 404)


def _json_for_script(data: object) -> str:
    """JSON safe to embed in a <script type="application/json"> element (no "</script>", no HTML entities)."""
    text = json.dumps(data, ensure_ascii=True, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _iso_utc(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).isoformat().replace("+00:00", "Z")


def page_config(
    session: PageSession, *, status_poll_interval: float, emulator_controls_url: str | None = None
) -> dict[str, object]:
    """The join parameters as embedded in the call page (element #call-config); with the Agora emulator, also
    where typed lines go (``typeUrl``: the emulator hears them as the member's speech in this channel)."""
    config: dict[str, object] = {
        "appId": session.app_id,
        "channel": session.channel,
        "token": session.rtc_token,
        "uid": int(session.user_uid),
        "agentUid": int(session.agent_uid),
        "state": session.state,
        "expiresAt": _iso_utc(session.expires_at),
        "maxMinutes": int(session.max_minutes),
        "pollIntervalMs": max(100, round(status_poll_interval * 1000)),
        "pageId": session.page_id,
        "reopened": session.reopened,
        "elapsedSeconds": round(session.elapsed_seconds),
        "rejoinSeconds": session.rejoin_seconds,
    }
    if emulator_controls_url is not None:
        config["typeUrl"] = f"{emulator_controls_url}/channels/{quote(session.channel, safe='')}/user_says"
    return config


def render_call_page(settings: PageSettings, session: PageSession, words: Words) -> str:
    config = page_config(
        session,
        status_poll_interval=settings.status_poll_interval,
        emulator_controls_url=settings.emulator_controls_url,
    )
    config["words"] = words.prefixed("page.")  # what the script says, in the page's language
    values = {
        "SDK_URL": html.escape(settings.sdk_url, quote=True),
        "CONFIG_JSON": _json_for_script(config),
        "FOOTER": html.escape(words.count("count.page_footer", int(session.max_minutes))),
    }
    page = _PLACEHOLDER_RE.sub(lambda m: values.get(m.group(1), m.group(0)), settings.call_template)
    return in_words(page, words)


def load_page_settings(
    sdk_url: str, public_url: str, status_poll_interval: float, emulator_controls_url: str | None
) -> PageSettings:
    """The page's settings and templates, read once when the app is built."""
    public_origin = origin_of(public_url)
    if public_origin is None:
        raise ValueError("public_url must be an absolute http(s) URL")
    return PageSettings(
        sdk_url=sdk_url,
        public_url=public_url.rstrip("/"),
        public_origin=public_origin,
        csp=build_csp(sdk_url, emulator_controls_url),
        call_template=(STATIC_DIR / "call.html").read_text(encoding="utf-8"),
        notice_html=(STATIC_DIR / "notice.html").read_text(encoding="utf-8"),
        preview_html=PREVIEW_HTML,
        status_poll_interval=status_poll_interval,
        emulator_controls_url=emulator_controls_url,
    )


async def call_page(request: web.Request) -> web.StreamResponse:
    token = request.match_info["link_token"]
    if not is_valid_link_token(token):
        return _invalid_page(request)
    settings = request.app[SETTINGS_KEY]
    # Link unfurlers (Discord embeds the links it sees) and HEAD probes must not bind the link to themselves.
    if request.method == "HEAD" or _LINK_PREVIEW_UA.search(request.headers.get("User-Agent", "")):
        return _html_page(request, settings.preview_html)
    try:
        session = await request.app[BACKEND_KEY].open_page(token, browser=browser_cookie(request))
    except OpenElsewhere:
        return _notice(request, "elsewhere", 409)
    if session is None or session.state not in PAGE_STATES:
        status = await request.app[BACKEND_KEY].status(token, browser=browser_cookie(request))
        if status is not None and status.state in ("ended", "failed"):
            return _notice(request, "ended", 410)
        return _invalid_page(request)
    page = render_call_page(settings, session, page_words(request))
    response = web.Response(text=page, content_type="text/html", charset="utf-8")
    if session.browser_key is not None:
        response.set_cookie(
            BROWSER_COOKIE,
            session.browser_key,
            max_age=BROWSER_COOKIE_MAX_AGE,
            path="/",
            httponly=True,
            samesite="Lax",  # sent when the member opens the link from Discord again (a top-level navigation)
            secure=settings.public_url.startswith("https://"),
        )
    return response


def browser_cookie(request: web.Request) -> str | None:
    value = request.cookies.get(BROWSER_COOKIE)
    return value if value and is_valid_link_token(value) else None
