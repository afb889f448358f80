"""SGLang as kctl knows it: the HTTP client, and each release from 0.5.9 to the newest.

- :mod:`kctl.sglang.client`: ``SGLangClient``, the one HTTP client kctl talks to a server
  with (health, gate, status).
- :mod:`kctl.sglang.releases`: the release model (``release("0.5.23")``), read from
  ``data/releases.json``: the server parser's options, the launcher, the kernel hooks, the
  speculative-decoding metric names, and the spelling kctl renders per release.
- :mod:`kctl.sglang.argv`: ``check_argv``, a launch argv read as that release's parser
  reads it, with one ``Problem`` (flag, message, fix) per refusal.
- :mod:`kctl.sglang.probe`: a standard-library script that describes an image's own
  installed SGLang parser (``release_from_probe`` reads its output).
- :mod:`kctl.sglang.generate`: ``python -m kctl.sglang.generate`` writes the table from
  the published wheels (see docs/sglang-releases.md).
"""
