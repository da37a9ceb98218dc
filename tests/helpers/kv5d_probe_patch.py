"""A test-only patch, registered through the ``sglang_kv5d.patches`` entry-point
group by a fake dist-info (see tests/test_activation.py). It replaces SGLang's
real ``get_bool_env_var`` (from-imported by ~90 SGLang modules) with a
counting pass-through, so a test can prove where the engine installed it and
that deactivate() restored every copy.
"""

import functools

from sglang_kv5d.patches import Binding, Patch
from sglang_kv5d.surface import REPLACE, Surface

CALLS = []

SURFACE = Surface(
    id="probe.get_bool_env_var",
    targets=("sglang.srt.utils.common:get_bool_env_var",),
    action=REPLACE,
    params=(("name", "default"),),
)


def _make(original):
    @functools.wraps(original)
    def counting(*args, **kwargs):
        CALLS.append(args[0] if args else kwargs.get("name"))
        return original(*args, **kwargs)

    return counting


PATCH = Patch(
    name="engine-probe",
    summary="test-only: counting pass-through on sglang.srt.utils.common.get_bool_env_var",
    bindings=(Binding("probe.get_bool_env_var", _make),),
    extra_surfaces=(SURFACE,),
)
