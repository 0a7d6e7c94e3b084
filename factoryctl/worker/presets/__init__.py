"""Agent presets: the coding-agent CLIs a worker runs as harnesses (``claude``, ``codex``, ``gemini``).

Each preset is one module that knows its CLI's command line, configuration files, environment and
structured output (:class:`~factoryctl.worker.presets.base.Preset`); :mod:`.harness` runs any preset the
same way (in the sandbox, with the run's agent home, turning the CLI's output into transcript events) and
:data:`PRESETS` names them (docs/agents.md).
"""
