"""kctl: ship custom GPU kernels into SGLang serving, gated and reversible."""

__version__ = "0.1.0.dev0"
