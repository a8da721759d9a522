"""``-h`` / ``--help`` and mistyped flags for every zhlm command: :func:`run` replaces
``absl.app.run``.

Why: absl's own help lists only the program's flags (and ``--helpfull`` absl's too), never the
``--config.KEY`` overrides, whose names, defaults and meanings live in ``zhlm/defaults.py``;
and a mistyped key ends in a long traceback from ``ml_collections``. Here ``--help`` prints the
program's docstring, its flags, and every key of the chosen ``--config`` (the base schema when
none is given) grouped by section, with its value and the one-line comment ``defaults.py``
declares it with. A key no config declares, or a flag the program does not have, is one line
that names the closest ones.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import io
import sys
import tokenize

from absl import app, flags

HELP = ("-h", "--help", "-help", "--helpshort", "--helpfull")


def run(main):
    """``app.run(main)`` with the parsing of this module, in a process settled as a program's
    (``zhlm.cli.settle_process``); ``main``'s module is the program."""
    from zhlm import cli

    cli.settle_process()
    module = sys.modules[main.__module__]
    app.run(main, flags_parser=functools.partial(parse, module=module))


def parse(argv: list[str], module) -> list[str]:
    name = module.__spec__.name if module.__spec__ else module.__name__  # "python -m" too
    program = "zhlm-" + name.rsplit(".", 1)[-1]
    given = _config_spec(argv)  # as the user wrote it, for messages
    try:
        argv = _config_by_name(argv)
    except FileNotFoundError as e:
        sys.exit(f"{program}: {e}")
    if any(arg in HELP for arg in argv[1:]):
        try:
            print(help_text(program, module, argv), flush=True)
        except BrokenPipeError:  # `--help | head`
            sys.stdout = None
        sys.exit(0)
    spec = _config_spec(argv)
    if spec is not None:
        problem = unknown_config_keys(spec, argv)
        if problem:
            sys.exit(f"{program}: {problem}; `{program} --help --config={given}` lists the keys")
    try:
        return flags.FLAGS(argv)
    except (flags.Error, AttributeError, KeyError, TypeError, ValueError) as e:
        names = [f"--{name}" for name in _program_flags(module)]
        close = difflib.get_close_matches(str(e).split("'")[1] if "'" in str(e) else "", names)
        hint = f" (closest: {', '.join(close)})" if close else ""
        sys.exit(f"{program}: {e}{hint}; `{program} --help` lists the flags")


def _config_by_name(argv: list[str]) -> list[str]:
    """``--config=bert:tiny`` (or ``finetune/ocnli``, or ``configs/bert.py`` from another
    directory) made the path of the recipe file, which the config flag reads; raises
    ``FileNotFoundError`` naming the recipes when there is none."""
    out = []
    for arg in argv:
        if arg.startswith("--config=") and "=" in arg:
            name, colon, rest = arg.split("=", 1)[1].partition(":")
            from zhlm import config_files

            arg = f"--config={config_files.path(name)}{colon}{rest}"
        out.append(arg)
    return out


def _config_spec(argv) -> str | None:
    for i, arg in enumerate(argv[1:], 1):
        if arg.startswith("--config="):
            return arg.split("=", 1)[1]
        if arg == "--config" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def _overrides(argv) -> list[str]:
    """The keys of ``--config.KEY=VALUE`` (and ``--config.KEY VALUE``) arguments."""
    keys = []
    for arg in argv[1:]:
        if arg.startswith("--config."):
            keys.append(arg[len("--config.") :].split("=", 1)[0])
        elif arg.startswith("--noconfig."):  # absl's form of a false boolean
            keys.append(arg[len("--noconfig.") :])
    return keys


def _load(spec: str | None, schema: str):
    from zhlm import config_files, defaults

    if spec is None:
        return (
            defaults.get_finetune_config() if schema == "finetune" else defaults.get_base_config()
        )
    return config_files.load(spec)


def _flat(config, prefix="") -> dict:
    out = {}
    for key, value in config.items():
        if hasattr(value, "items"):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def unknown_config_keys(spec: str, argv) -> str:
    """One line naming every override key ``spec``'s config does not declare and the closest
    keys it does, or "" when all are declared. A config that does not load is left to the flag
    parser, whose error names the file."""
    try:
        keys = list(_flat(_load(spec, "")))
    except Exception:
        return ""
    unknown = [k for k in _overrides(argv) if k not in keys]
    parts = []
    for key in unknown:
        close = _closest(key, keys)
        parts.append(
            f"config.{key}"
            + (f" (closest: {', '.join('config.' + c for c in close)})" if close else "")
        )
    return f"unknown key {'; '.join(parts)}" if parts else ""


def _closest(key: str, keys: list[str]) -> list[str]:
    """Declared keys like ``key``: the same name in another section, a close name in any
    section, or a close whole key (``train.epoch`` finds ``train.epochs``, not ``train.mesh``)."""
    leaf = key.split(".")[-1]
    leaves = {k.split(".")[-1] for k in keys}
    near = set(difflib.get_close_matches(leaf, leaves, n=3, cutoff=0.75))
    same = [k for k in keys if k.split(".")[-1] in near]
    return (same or difflib.get_close_matches(key, keys, n=3, cutoff=0.85))[:3]


@functools.cache
def key_comments() -> dict[tuple[str, str], str]:
    """``{(function, key): comment}`` for every key declared in ``zhlm/defaults.py``: the comment
    on the key's line, else the comment lines right above it."""
    from zhlm import defaults

    source = inspect.getsource(defaults)
    lines = source.splitlines()
    comments = {
        tok.start[0]: tok.string.lstrip("#").strip()
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    }
    out = {}
    for function in ast.parse(source).body:
        if not isinstance(function, ast.FunctionDef):
            continue
        for node in ast.walk(function):
            if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Attribute):
                out[(function.name, node.targets[0].attr)] = comments.get(node.lineno, "")
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "dict":
                for keyword in node.keywords:
                    if keyword.arg is None:
                        continue
                    line = keyword.value.end_lineno
                    text = comments.get(line) if lines[line - 1].split("#")[0].strip() else None
                    if text is None:
                        above, row = [], keyword.lineno - 1
                        while row in comments and lines[row - 1].lstrip().startswith("#"):
                            above.insert(0, comments[row])
                            row -= 1
                        text = " ".join(above)
                    out[(function.name, keyword.arg)] = text
    return out


def _comment(section: str, key: str, finetune: bool) -> str:
    comments = key_comments()
    functions = [f"_finetune_{section}", "get_finetune_config"] if finetune else []
    functions += [f"_{section}", "_text", "_steps", "_sharding", "get_base_config"]
    return next((comments[f, key] for f in functions if comments.get((f, key))), "")


def _program_flags(module) -> dict:
    """The flags ``module`` defines (its ``FlagHolder`` globals), by name."""
    holders = [v for v in vars(module).values() if isinstance(v, flags.FlagHolder)]
    return {h.name: flags.FLAGS[h.name] for h in holders}


def help_text(program: str, module, argv) -> str:
    out = [(module.__doc__ or program).strip(), "", "flags:"]
    for name, flag in sorted(_program_flags(module).items()):
        default = "" if flag.default in (None, "") else f" (default: {flag.default})"
        out.append(f"  --{name}: {flag.help}{default}")
    if "config" not in _program_flags(module):
        return "\n".join(out)
    spec = _config_spec(argv)
    schema = "finetune" if "finetune" in program else ""
    try:
        config = _load(spec, schema)
    except Exception as e:  # a config that does not load: say so, still show the flags
        return "\n".join(out + ["", f"--config={spec} does not load: {e}"])
    finetune = "task" in config
    where = (
        f"--config={spec}" if spec else "the base schema (add --config=FILE.py:ARG for a recipe)"
    )
    out += ["", f"config keys (set with --config.KEY=VALUE), values of {where}:"]
    for section, values in config.items():
        if not hasattr(values, "items"):
            comment = _comment("", section, finetune)
            out.append(f"  {section} = {values!r}" + (f"  # {comment}" if comment else ""))
            continue
        out.append(f"  {section}:")
        for key, value in _flat(values).items():
            comment = _comment(section, key.split(".")[0], finetune)
            out.append(f"    {section}.{key} = {value!r}" + (f"  # {comment}" if comment else ""))
    return "\n".join(out)
