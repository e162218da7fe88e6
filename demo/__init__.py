"""`python3 tasks.py demo`: the real bot on this machine against loopback stand-ins of Discord, Agora and an LLM
(``standins``), with a terminal for one demo member. A product feature for trying the bot without any account;
it never runs in production."""
