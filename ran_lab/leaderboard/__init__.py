"""The leaderboard: the four architectures and their baselines on one data set, budget and
machine (docs/leaderboard.md). :mod:`.board` reads the plan (``configs/leaderboard/board.json``),
:mod:`.run` makes its runs with the reproduction engine, :mod:`.quality` gives each system's
interval, rank and pairwise verdicts, :mod:`.cost` measures the cost columns, :mod:`.page` writes
``results/leaderboard/``."""
