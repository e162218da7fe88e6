"""``python -m standins.discord_gateway``: the fake Discord in a process of its own."""

from standins.discord_gateway.fake import main

if __name__ == "__main__":
    raise SystemExit(main())
