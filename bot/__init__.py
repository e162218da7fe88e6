"""Memory Call: a Discord bot whose Agora voice agent remembers members."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("memory-call-bot")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"
