"""``python -m standins.llm_server``: the fake LLM in a process of its own."""

from standins.llm_server.server import main

if __name__ == "__main__":
    raise SystemExit(main())
