"""Local stand-ins of the remote services and the builders the tests, the benches and the demo share.

Stand-ins: a fake Discord (REST and gateway, ``discord_gateway``), an emulator of Agora's Conversational AI REST
API and webhooks (``agora_emulator``) and a fake OpenAI-compatible LLM (``llm_server``), each runnable on its own
(``python -m standins.discord_gateway``). Builders: the bot's services assembled against them (``harness``), a
throwaway PostgreSQL cluster (``postgres``) and records (``factories``). Test code, checked by the tests under
``tests/standins``; ``bench/`` and ``demo/`` import these and never ``tests`` (``tests/test_architecture.py``).
"""
