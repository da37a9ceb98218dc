"""Process targets for the spawn / fork tests (must be importable by reference)."""

import json
import os


def report_activation(queue):
    import sglang.srt.utils.common as common  # triggers the .pth bootstrap in a spawn child

    import sglang_kv5d

    st = sglang_kv5d.status()
    probe = [p for p in st.patches if p.name == "engine-probe"]
    queue.put(
        json.dumps(
            {
                "pid": os.getpid(),
                "gate": os.environ.get("SGLANG_KV5D"),
                "active": st.active,
                "routes": st.routes,
                "probe": probe[0].state if probe else None,
                "patched": getattr(common.get_bool_env_var, "__kv5d_patch__", None),
            }
        )
    )
