"""Test and benchmark support for kdtree_mla; not part of the kdtree-mla wheel.

The wheel that goes into the serving image holds ``kdtree_mla`` and ``kdtree_mla.sglang`` only
(``pyproject.toml``'s package list, ``build-files.txt``); this package sits beside them in
``kernels/`` for the tests (``kernels/tests/conftest.py`` puts ``kernels/`` on the path) and the
benchmarks in ``kernels/bench/``:

* :mod:`.ref`         the fp64 torch reference and the tree-mask helpers;
* :mod:`.inputs`      random verify-call inputs (NaN-poisoned unused pool rows), ``KV_DTYPES``;
* :mod:`.standalone`, :mod:`.standalone_runtime`, :mod:`.standalone_stubs`,
  :mod:`.standalone_objects`  SGLang's real Triton backend from a published wheel, outside a
  server (the SGLang GPU tests and the step bench);
* :mod:`.accuracy`    the GPU tests' error bound (relative to PyTorch's own at bf16) and NaN
  poison for the workspace;
* :mod:`.benchinfo`   what both benchmarks measure and record the same way: the copy bandwidth,
  and the command, commit, driver, GPU and clocks of a run.
"""
