"""Logic behind ``sglang-kv5d launch`` and ``sglang-kv5d check``.

    sglang-kv5d launch [--kv5d-* OPTIONS] [--] SGLANG_ARGS...
    sglang-kv5d check  [--kv5d-* OPTIONS] [--explain ID] [--] SGLANG_ARGS...

    argv.py           our --kv5d-* options split from SGLang's arguments; UsageError
    profile.py        launch profiles (TOML: description, args, [env]), validated
    environment.py    the launch environment and each value's origin (precedence)
    renames.py        options SGLang renamed between releases, translated
    sglang_parser.py  SGLang's own parser (capturing), argument segments, hints after its errors
    probes.py         which patches cannot apply here (KV5D011), known patch names
    quiet.py          importing SGLang without its import-time prints reaching our output
    plan.py           make_plan: all of the above and the launch rules, never execs
    render.py         findings, summary, parse errors, the dry run as a safe shell script
    run.py            run_check / run_launch (the click commands call these; launch execs)

Importing this package imports neither SGLang nor torch.
"""
