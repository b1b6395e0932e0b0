"""One module per ``modforge`` sub-command, each with ``NAME``, ``HELP`` and ``run(argv)``."""
