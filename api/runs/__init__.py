"""Runs: the run state machine, run store functions, the queue and the run API routes."""
