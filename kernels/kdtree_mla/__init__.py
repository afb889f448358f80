"""kdtree_mla: MLA target-verify attention (tree-masked draft tokens) for sm_90 and sm_120.

Import the API from :mod:`kdtree_mla.api`; the fp64 reference is :mod:`kdtree_mla.ref`.
"""

__version__ = "0.1.0"
