"""The bot's connections to its OpenAI-compatible server, made in one place for every client of it.

Chat completions, the model list and embeddings (``LLMClient``, ``EmbeddingClient``) send their requests through
one pooled httpx client each; the voice relay's streams (``LLMClient.open_stream``) through an aiohttp session
made on first use (see ``bot.llm.client`` for why that path is aiohttp). ``LLMConnection`` makes both, with the
same headers (the client's User-Agent, the API key as a bearer token), the same timeout and the environment's
proxy, and masks the key out of any server text an error quotes. The Agora API is the other remote; its client
(``bot.agora.client``) makes its own connections, with httpx alone.
"""

from __future__ import annotations

import aiohttp
import httpx
from aiohttp.helpers import get_env_proxy_for_url
from yarl import URL

from bot.llm.errors import BASE_URL_SETTING


class LLMConnection:
    """One server's base URL, key and timeout, and the HTTP clients that reach it."""

    def __init__(
        self,
        *,
        base_url: str,
        api_key: str | None,
        timeout: float,
        user_agent: str,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"{BASE_URL_SETTING} must start with http:// or https://, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key or None
        self.timeout = timeout
        self.headers = {"User-Agent": user_agent}
        if self.api_key:
            self.headers["Authorization"] = f"Bearer {self.api_key}"
        self.http = httpx.AsyncClient(timeout=timeout, headers=self.headers, transport=transport)
        self._streams: aiohttp.ClientSession | None = None

    def streams(self) -> aiohttp.ClientSession:
        """Made on first use, inside the running event loop (aiohttp's requirement); idle connections are kept
        for reuse, so a voice turn rarely waits for a TCP handshake.

        The environment's proxy for the server's URL (``HTTPS_PROXY``/``HTTP_PROXY``, ``NO_PROXY``), which httpx
        honours too, is read here, once. aiohttp's ``trust_env`` would read it, and ``~/.netrc``, again for every
        request, each in a worker thread: two thread hops before each voice turn's request is sent."""
        if self._streams is None or self._streams.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.timeout, sock_read=self.timeout)
            proxy, proxy_auth = _env_proxy(self.base_url)
            self._streams = aiohttp.ClientSession(
                headers=self.headers, timeout=timeout, proxy=proxy, proxy_auth=proxy_auth
            )
        return self._streams

    def redact(self, text: str) -> str:
        """``text`` with the API key masked (some servers echo the key they rejected)."""
        return text.replace(self.api_key, "***") if self.api_key else text

    async def aclose(self) -> None:
        await self.http.aclose()
        if self._streams is not None:
            await self._streams.close()
            self._streams = None


def _env_proxy(base_url: str) -> tuple[URL | None, aiohttp.BasicAuth | None]:
    """The proxy the environment sets for ``base_url`` (and its credentials), or none (unset, or NO_PROXY)."""
    try:
        return get_env_proxy_for_url(URL(base_url))
    except LookupError:
        return None, None
