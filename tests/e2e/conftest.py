"""End-to-end tests reuse the SimCord bot fixtures of the cog tests (real services, local stand-ins)."""

from tests.cogs.conftest import member, services, simcord_bot, world  # noqa: F401
