"""``python -m standins.agora_emulator``: the emulator and its test controls in a process of their own."""

from standins.agora_emulator.controls import main

if __name__ == "__main__":
    raise SystemExit(main())
