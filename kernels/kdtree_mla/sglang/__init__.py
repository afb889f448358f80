"""SGLang integration of the kdtree_mla verify kernel.

Inside an SGLang server process this package routes the Triton attention backend's
*target-verify* attention for absorbed MLA (q 576 / v 512, a bf16 or fp8 KV cache, page size 1)
to :func:`kdtree_mla.api.extend_attention_fwd`, and leaves every other call on SGLang's own
code. It enters as the ``kdtree`` attention backend (``--attention-backend kdtree``) on releases
with the plugin framework (0.5.11 on), or through the startup hook (``KDTREE_VERIFY=1``) on
0.5.9 to 0.5.10.post1.

Modules (each imports nothing heavy at import time unless said so):

* :mod:`.loglines`    the activation/decline log-line contract (format strings and regexes);
* :mod:`.versions`    which SGLang versions are supported and how their call layout differs;
* :mod:`.releases`    which path and hooks each release takes, as data;
* :mod:`.eligibility` pure decisions: may this server / this call use the kernel, and if not, why;
* :mod:`.announce`    prints the one activation or decline line per process;
* :mod:`.plugin`, :mod:`.backend`  the ``kdtree`` attention backend the plugin framework registers;
* :mod:`.hook`        the post-import hook that patches SGLang modules when they are first imported;
* :mod:`.patch`       the patch of the Triton backend class and :func:`.patch.attach`, which gives
  one backend instance its router (torch is imported lazily, inside an SGLang process only);
* :mod:`.router`      the :class:`~.router.VerifyRouter` that stands in for ``extend_attention_fwd``;
* :mod:`.facts`       the server's facts, read from SGLang's model runner, the device and the build.

SGLang's real Triton backend outside a server (the GPU tests and the step bench) is test support,
in ``kernels/kdtree_mla_testing/``, which the wheel does not ship.
"""
