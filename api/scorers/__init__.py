"""Scorers judge runs (docs/scorers.md): the sampling, prompt and label rules (``verdicts``), the turn
that starts judge runs and records their answers (``judging``) and its periodic job (``job``)."""
