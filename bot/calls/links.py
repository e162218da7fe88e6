"""Call links: random, single-call tokens that are stored only as keyed hashes."""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets

log = logging.getLogger(__name__)


class LinkTokens:
    def __init__(self, signing_key: str | None):
        if not signing_key:
            log.warning(
                "web.link_signing_key (WEB_LINK_SIGNING_KEY) is not set: call links are hashed with a random key "
                "for this process and stop working when the bot restarts"
            )
            signing_key = secrets.token_urlsafe(32)
        self._key = signing_key.encode()

    @staticmethod
    def new() -> str:
        return secrets.token_urlsafe(32)

    def hash(self, token: str) -> str:
        return hmac.new(self._key, token.encode(), hashlib.sha256).hexdigest()
