"""The bot's web layer: the call page served to Discord members, its JSON API, the Agora webhook, /healthz.

It talks to the rest of the bot only through ``bot.web.backend.CallPageBackend``; nothing here imports discord.
"""

from bot.web.access_log import RedactingAccessLogger
from bot.web.backend import CallPageBackend, CallStatus, PageSession
from bot.web.server import WebServer, create_app

__all__ = ["CallPageBackend", "CallStatus", "PageSession", "RedactingAccessLogger", "WebServer", "create_app"]
