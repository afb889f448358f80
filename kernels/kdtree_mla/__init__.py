"""kdtree_mla: MLA target-verify attention (tree-masked draft tokens) for sm_90 and sm_120.

Import the API from :mod:`kdtree_mla.api`. The fp64 reference and the test inputs are test
support (``kdtree_mla_testing.ref``, ``kdtree_mla_testing.inputs`` beside this package in
``kernels/``), not part of the wheel.
"""

__version__ = "0.1.0"
