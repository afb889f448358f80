"""SGLang integration of the kdtree_mla verify kernel (issue 5).

Inside an SGLang server process started with ``KDTREE_VERIFY=1`` this package routes the Triton
attention backend's *target-verify* attention for absorbed MLA (q 576 / v 512, bf16 KV cache,
page size 1) to :func:`kdtree_mla.api.extend_attention_fwd`, and leaves every other call on
SGLang's own code.

Modules (each imports nothing heavy at import time unless said so):

* :mod:`.loglines`    the activation/decline log-line contract (format strings and regexes);
* :mod:`.versions`    which SGLang versions are supported and how their call layout differs;
* :mod:`.eligibility` pure decisions: may this server / this call use the kernel, and if not, why;
* :mod:`.announce`    prints the one activation or decline line per process;
* :mod:`.hook`        the post-import hook that patches SGLang modules when they are first imported;
* :mod:`.patch`       the patch itself (imports torch lazily, inside an SGLang process only).

The startup entry point is :func:`kdtree_mla._startup.install`, run by the ``.pth`` file the
kernels package installs. Nothing here is imported unless ``KDTREE_VERIFY=1``.
"""
