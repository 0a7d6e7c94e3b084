"""factoryctl: the command-line composition root that wires the store, reconciler and API together."""

__version__ = "0.1.0"
