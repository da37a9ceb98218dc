"""aiter.ops.triton.utils._triton.kernel_repr (fake).

``make_kernel_repr(name, keys)`` returns the callable that SGLang hands to
``triton.jit(repr=...)``; it names compiled kernels. The fake ignores the keys.
"""


def make_kernel_repr(base_name, config_keys=()):
    keys = tuple(config_keys)

    def _repr(specialization=None, *args, **kwargs):
        constants = getattr(specialization, "constants", None) or {}
        parts = [f"{k}={constants[k]}" for k in keys if isinstance(constants, dict) and k in constants]
        return "_".join([base_name] + parts)

    return _repr
