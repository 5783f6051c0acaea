# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""What is wrong with an instance list, and how its values are written into an env file.

    {{ instances | dflash.deploy.instances_typed(defaults) }}              over the defaults; ports, GPUs, draft
                                                                           tokens as ints, once
    {{ instances | dflash.deploy.instance_errors(environment, api_keys) }} ->  [] when the list is sound
    {{ settings | dflash.deploy.setting_errors }}                          the role's own values in unit and env file
    {{ value | dflash.deploy.systemd_env_quote }}                          one EnvironmentFile= value, double-quoted
    {{ env_files | dflash.deploy.surge_leftovers(instances) }}             the surge workers an interrupted run left

Types and unknown keys are the argument spec's job, but a role's argument spec checks a value
without converting it (``port: "30001"`` passes as an int and stays a string), so the list is
converted once (``instances_typed``) and every check here compares what it converted. Beyond
types this checks what a spec cannot: unique names that fit a systemd unit name, ports in range
and not shared, GPUs not shared, the keys a present instance needs, and every value that reaches
the env file (``/etc/dflash/<instance>.env``) or the unit: one line each (no newline, CR or NUL),
variable names systemd accepts, nothing that would expand.

Every error is one line that names the instance and the key and says what to change. Values are
not repeated in the errors (an environment value or the API key may be a secret); names, ports and
GPU indexes are.
"""
from __future__ import annotations

import base64
import ipaddress
import posixpath
import re

from ansible_collections.dflash.deploy.plugins.module_utils.host.readiness import parse_env_file

# An instance name becomes the unit sglang-dflash@<name>.service, its drop-in directory
# sglang-dflash@<name>.service.d, /etc/dflash/<name>.env (and its backups <name>.env.<pid>.<date>~)
# and, through systemd, longer names still: PrivateTmp's /tmp/systemd-private-<32 hex>-<unit>-XXXXXX
# must fit 255 bytes, which allows at most 177 characters. 64 leaves room for all of them.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]*")
NAME_MAX = 64
NEEDED = ("model_path", "served_model_name", "gpus", "port")
ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
API_KEY = re.compile(r"[\x21-\x7e]+")  # printable ASCII, no space: an HTTP header's value
# One env file value at most (bytes): the kernel refuses execve() with a string of the environment over
# MAX_ARG_STRLEN (128 KiB), so a larger value is refused here, before any change (round 3, m2).
MAX_VALUE_BYTES = 65536
DIGITS = re.compile(r"[0-9]+")
# Values of an instance that instance.env.j2 writes, one line each.
ENV_VALUES = ("model_path", "draft_model_path", "served_model_name", "host", "speculative_algorithm",
              "attention_backend")
# The variables the role writes into every env file itself, and what sets each. An `environment`
# entry of the same name would silently replace it (it is written later), so it is refused.
MANAGED = {
    "CUDA_VISIBLE_DEVICES": "gpus", "CUDA_HOME": "sglang_service_cuda_home", "PATH": "sglang_service_path",
    "HOME": "sglang_service_state_dir", "XDG_CACHE_HOME": "sglang_service_cache_dir",
    "TRITON_CACHE_DIR": "sglang_service_cache_dir", "FLASHINFER_WORKSPACE_BASE": "sglang_service_cache_dir",
    "TVM_FFI_CACHE_DIR": "sglang_service_cache_dir", "CUDA_DEVICE_ORDER": "gpus (nvidia-smi's PCI order)",
    "SGLANG_MODEL_PATH": "model_path", "SGLANG_DRAFT_MODEL_PATH": "draft_model_path",
    "SGLANG_SERVED_MODEL_NAME": "served_model_name", "SGLANG_HOST": "host", "SGLANG_PORT": "port",
    "SGLANG_SPECULATIVE_ALGORITHM": "speculative_algorithm", "SGLANG_NUM_DRAFT_TOKENS": "num_draft_tokens",
    "SGLANG_ATTENTION_BACKEND": "attention_backend", "SGLANG_EXTRA_ARGS": "extra_args", "SGLANG_API_KEY": "api_key",
}
# The role's variables that the unit template, the launcher (a shell script) or the lock name:
# systemd expands `%` specifiers and `$VAR` in ExecStart=, splits ReadWritePaths= on spaces, and the
# launcher quotes them in "...": only plain path characters, with nothing to expand or split.
UNIT_PATHS = ("sglang_service_base_dir", "sglang_service_config_dir", "sglang_service_state_dir",
              "sglang_service_cache_dir")
UNIT_NAMES = ("sglang_service_user", "sglang_service_group")
SAFE_PATH = re.compile(r"/[A-Za-z0-9._+/-]*")
SAFE_ACCOUNT = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}")
# The role's variables written into the env file only (quoted there; no specifiers expand in it).
ENV_SETTINGS = ("sglang_service_cuda_home", "sglang_service_path")


def as_int(value):
    """An int from an int (not a bool) or a string of ASCII digits; None for anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and DIGITS.fullmatch(value):
        return int(value)
    return None


def _typed(inst):
    if not isinstance(inst, dict):
        return inst
    out = dict(inst)
    for key in ("port", "num_draft_tokens"):
        if as_int(out.get(key)) is not None:
            out[key] = as_int(out[key])
    gpus = out.get("gpus")
    if isinstance(gpus, list) and all(as_int(g) is not None for g in gpus):
        out["gpus"] = [as_int(g) for g in gpus]
    return out


def instances_typed(instances, defaults=None) -> list:
    """The list with each instance over ``defaults`` (its own keys win; the merge is shallow, as
    ``combine`` does), and port, num_draft_tokens and each GPU index as ints where they are written
    as digits; anything else is left as it is, for instance_errors to name."""
    base = defaults if isinstance(defaults, dict) else {}
    return [_typed({**base, **inst} if isinstance(inst, dict) else inst) for inst in instances or []]


def name_error(name) -> str | None:
    """Why an instance name cannot be a unit instance name, or None."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        return (f"instance name {name!r}: use letters, digits, '-' and '_' only, starting with a letter or digit "
                f"(it becomes the unit sglang-dflash@<name>.service)")
    if len(name) > NAME_MAX:
        return (f"instance name {name[:16]}... is {len(name)} characters: the limit is {NAME_MAX} (systemd derives "
                f"file names of at most 255 bytes from sglang-dflash@<name>.service)")
    return None


def _label(name) -> str:
    """An instance name as errors show it: as it is when valid, else its repr (one line)."""
    return name if isinstance(name, str) and NAME.fullmatch(name) and len(name) <= NAME_MAX else repr(name)


def env_key_error(key) -> str | None:
    """Why a key cannot be an env file variable name, or None."""
    if not isinstance(key, str) or not ENV_KEY.fullmatch(key):
        return (f"key {key!r} is not a variable name: use letters, digits and '_', not starting with a digit "
                f"(systemd ignores any other line of an env file)")
    return None


def env_value_error(value) -> str | None:
    """Why a value cannot be one line of an env file, or None. Said without the value."""
    if isinstance(value, (dict, list, tuple, set)):
        return f"is a {type(value).__name__}: give a string or a number"
    text = "" if value is None else str(value)
    for char, what in (("\n", "a newline"), ("\r", "a carriage return"), ("\0", "a NUL byte")):
        if char in text:
            return f"holds {what}: an env file value must be one line (it would start a line of its own)"
    if text.endswith("\\"):
        return "ends in a backslash, which joins the next line in an env file: remove it"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return "is not valid UTF-8 text (systemd ignores such a line)"
    if size > MAX_VALUE_BYTES:
        return (f"is {size} bytes, more than the {MAX_VALUE_BYTES} an env file value may have here (the kernel "
                f"refuses to start a process with a larger one): keep it in a file and name the file")
    return None


def api_key_error(key) -> str | None:
    """Why a key cannot be the instance's API key, or None. Said without the key: it must be one env file line,
    and printable ASCII without spaces, since every probe sends it in an HTTP header (round 3, m1: a key
    outside Latin-1 was written, then stopped readiness)."""
    problem = env_value_error(key)
    if problem is None and not API_KEY.fullmatch(str(key)):
        problem = ("holds a space, a control character or a character outside ASCII: give printable ASCII "
                   "(it travels in an HTTP header)")
    return problem


def env_errors(environment, where: str) -> list:
    """Errors of an `environment` mapping; `where` names it (``instance a: environment``)."""
    if environment in (None, ""):
        return []
    if not isinstance(environment, dict):
        return [f"{where} is a {type(environment).__name__}: give a mapping of NAME: value"]
    errors = []
    for key, value in environment.items():
        problem = env_key_error(key)
        if problem:
            errors.append(f"{where}: {problem}")
            continue
        if key in MANAGED:
            errors.append(f"{where} sets {key}, which the role writes itself: set {MANAGED[key]} instead")
        problem = env_value_error(value)
        if problem:
            errors.append(f"{where} {key} {problem}")
    return errors


def _value_errors(inst, label) -> list:
    errors = []
    for key in ENV_VALUES:
        problem = env_value_error(inst.get(key))
        if problem:
            errors.append(f"instance {label}: {key} {problem}")
    args = inst.get("extra_args")
    if args not in (None, []):
        if not isinstance(args, list):
            errors.append(f"instance {label}: extra_args is a {type(args).__name__}: "
                          f"give a list, one argument per item")
            args = []
        for index, arg in enumerate(args):
            problem = env_value_error(arg)
            if problem is None and (not isinstance(arg, (str, int)) or isinstance(arg, bool) or not str(arg)):
                problem = "is empty or not a string: give each server argument as its own non-empty string"
            if problem is None and re.search(r"\s", str(arg)):
                problem = "holds whitespace, which the launcher splits on: give each argument as its own item"
            if problem:
                errors.append(f"instance {label}: extra_args[{index}] {problem}")
    errors += env_errors(inst.get("environment"), f"instance {label}: environment")
    errors += host_errors(inst.get("host"), label)
    return errors


def host_errors(host, label) -> list:
    """A listen address that does not take connections to 127.0.0.1, where readiness, the performance
    gate and the fast path probe the instance and check who listens (round 3, N7): refused, since on
    another address nothing of the instance answers there and any local user may bind it."""
    if host in (None, "") or env_value_error(host):
        return []
    try:
        ip = ipaddress.ip_address(str(host))
        ok = ip.is_unspecified or ip == ipaddress.ip_address("127.0.0.1")
    except ValueError:
        ok = False
    if ok:
        return []
    return [f"instance {label}: host {host} does not take connections to 127.0.0.1, where the deploy probes the "
            f"instance (readiness, the performance gate, the fast path): give 0.0.0.0 (every address; keep the port "
            f"behind a firewall), :: or 127.0.0.1"]


def _number_errors(inst, label) -> list:
    errors = []
    port = inst.get("port")
    if port not in (None, ""):
        if as_int(port) is None:
            errors.append(f"instance {label}: port {port!r} is not an integer: give the port as a number, e.g. 30001")
        elif not 1 <= as_int(port) <= 65535:
            errors.append(f"instance {label}: port {as_int(port)} is out of range (1-65535)")
    gpus = inst.get("gpus")
    if gpus not in (None, "", []):
        if not isinstance(gpus, list):
            errors.append(f"instance {label}: gpus {gpus!r} is not a list: give GPU indexes, e.g. gpus: [1]")
        else:
            bad = [g for g in gpus if as_int(g) is None or as_int(g) < 0]
            if bad:
                errors.append(f"instance {label}: GPU {bad[0]!r} in gpus is not an index: give the GPU indexes "
                              f"nvidia-smi lists, as numbers")
            ints = [as_int(g) for g in gpus if as_int(g) is not None]
            for gpu in sorted({g for g in ints if ints.count(g) > 1}):
                errors.append(f"instance {label}: GPU {gpu} is listed twice in gpus")
    tokens = inst.get("num_draft_tokens")
    if tokens not in (None, "") and (as_int(tokens) is None or as_int(tokens) < 1):
        errors.append(f"instance {label}: num_draft_tokens {tokens!r} is not a positive integer")
    return errors


def _shared(present: list, key: str) -> dict:
    seen: dict = {}
    for inst in present:
        values = inst.get(key)
        label = (f"{_label(inst['surge_of'])}'s surge" if inst.get("surge_of") is not None
                 else _label(inst.get("name")))
        for value in values if isinstance(values, list) else [values]:
            value = as_int(value)
            if value is not None:
                seen.setdefault(value, []).append(label)
    return {value: names for value, names in seen.items() if len(names) > 1}


def instance_errors(instances, environment=None, api_keys=None) -> list:
    """One line per problem of the instance list; `environment`: sglang_service_environment;
    `api_keys`: {instance name: key} (said to be wrong, never shown)."""
    instances = instances_typed(instances)
    errors = []
    names = [i.get("name") if isinstance(i, dict) else None for i in instances]
    for name in sorted({_label(n) for n in names if names.count(n) > 1}):
        errors.append(f"instance name {name} is used twice: names must be unique")
    for name in names:
        problem = name_error(name)
        if problem:
            errors.append(problem)
    errors += env_errors(environment, "sglang_service_environment")
    for name, key in sorted((api_keys or {}).items(), key=lambda kv: str(kv[0])):
        problem = api_key_error(key) if key not in (None, "") else None
        if problem:
            errors.append(f"instance {_label(name)}: api_key {problem}")
    for inst in instances:
        if not isinstance(inst, dict):
            errors.append(f"instance {inst!r} is not a mapping: give name, gpus, port, ... as keys")
            continue
        state = inst.get("state", "present")
        if state not in ("present", "absent"):
            errors.append(f"instance {_label(inst.get('name'))}: state {state!r} is not present or absent")
    present = [i for i in instances if isinstance(i, dict) and i.get("state", "present") == "present"]
    for inst in present:
        label = _label(inst.get("name"))
        missing = [k for k in NEEDED if inst.get(k) in (None, "", [])]
        if missing:
            errors.append(f"instance {label}: set {', '.join(missing)}")
        errors += _number_errors(inst, label)
        errors += _value_errors(inst, label)
    surges = []
    for inst in present:
        problems = surge_errors(inst.get("surge"), _label(inst.get("name")))
        errors += problems
        if not problems and inst.get("surge"):
            surges.append(surge_worker(inst))
    present = present + surges
    for port, owners in sorted(_shared(present, "port").items()):
        errors.append(f"port {port} is assigned to {' and '.join(owners)}: give each instance its own port")
    for gpu, owners in sorted(_shared(present, "gpus").items()):
        if len(set(owners)) > 1:
            errors.append(f"GPU {gpu} is assigned to {' and '.join(dict.fromkeys(owners))}: "
                          f"give each instance its own GPUs")
    return errors


SURGE_SUFFIX = ".surge"  # not a character an instance name may hold: a surge worker's name is never one


def surge_errors(surge, label) -> list:
    """Why an instance's ``surge`` ({gpus, port}) cannot work, one line each ([] for none or a good one)."""
    if surge in (None, {}, ""):
        return []
    if not isinstance(surge, dict):
        return [f"instance {label}: surge is a {type(surge).__name__}: give {{gpus: [...], port: N}}"]
    errors = []
    unknown = sorted(set(surge) - {"gpus", "port"})
    if unknown:
        errors.append(f"instance {label}: surge has {', '.join(map(str, unknown))}: it takes gpus and port only")
    if surge.get("gpus") in (None, "", []) or surge.get("port") in (None, ""):
        errors.append(f"instance {label}: surge needs gpus and port "
                      "(the spare GPUs and the port its surge worker uses)")
    errors += [e.replace(f"instance {label}: ", f"instance {label}: surge ", 1)
               for e in _number_errors({"gpus": surge.get("gpus"), "port": surge.get("port")}, label)]
    return errors


def _as_ints(values) -> list:
    """Each value as an int where it is one, else as it is (instance_errors names what is not)."""
    return [as_int(v) if as_int(v) is not None else v for v in values]


def surge_worker(inst) -> dict:
    """The temporary worker a restart of ``inst`` starts on its surge GPUs and port (sglang_service's
    surge_up.yml): the instance's settings, its name with ``.surge`` (unit sglang-dflash@<name>.surge),
    the surge's GPUs and port, and ``surge_of`` the instance's name."""
    surge = inst.get("surge") or {}
    worker = {k: v for k, v in inst.items() if k != "surge"}
    worker.update(name=str(inst.get("name")) + SURGE_SUFFIX, surge_of=inst.get("name"),
                  gpus=_as_ints(surge.get("gpus") or []),
                  port=as_int(surge.get("port")) if as_int(surge.get("port")) is not None else surge.get("port"))
    return worker


def surge_workers(instances, names=None) -> list:
    """The surge workers of the instances (of those named, when ``names`` is given) that declare one."""
    wanted = None if names is None else {str(n) for n in names}
    return [surge_worker(i) for i in instances or []
            if isinstance(i, dict) and i.get("surge") and (wanted is None or str(i.get("name")) in wanted)]


def surge_leftovers(env_files, instances) -> list:
    """The surge workers an interrupted run left running: one for each ``<name>.surge.env`` on the host
    (``env_files``: ansible.builtin.slurp results, ``{source, content}`` base64), which only exists
    while a run's surge worker does (surge_down.yml removes it). A finished run leaves none, so every
    one found when a run starts is a leftover, whatever the instance list says now.

    Each is described as surge_worker describes it, so the router's surge entry point and surge_down.yml
    take it down as they take a run's own: the settings of its instance when that is still present, then
    what its env file says it runs with (port, served model, GPUs): the instance may have dropped its
    surge, or moved it, since."""
    present = {str(i.get("name")): i for i in instances or [] if isinstance(i, dict)}
    out = []
    for item in env_files or []:
        source = str((item or {}).get("source") or "")
        base = posixpath.basename(source)
        if not base.endswith(SURGE_SUFFIX + ".env"):
            continue
        name = base[: -len(".env")]
        owner = name[: -len(SURGE_SUFFIX)]
        env = parse_env_file(base64.b64decode((item or {}).get("content") or "").decode("utf-8", "replace"))
        worker = {k: v for k, v in present.get(owner, {}).items() if k != "surge"}
        worker.update(name=name, surge_of=owner, state="present")
        port = as_int(env.get("SGLANG_PORT"))
        if port is not None:
            worker["port"] = port
        if env.get("SGLANG_SERVED_MODEL_NAME"):
            worker["served_model_name"] = env["SGLANG_SERVED_MODEL_NAME"]
        if "CUDA_VISIBLE_DEVICES" in env:
            worker["gpus"] = _as_ints(g for g in env["CUDA_VISIBLE_DEVICES"].split(",") if g.strip())
        if env.get("SGLANG_HOST"):
            worker["host"] = env["SGLANG_HOST"]
        out.append(worker)
    return sorted(out, key=lambda w: w["name"])


def setting_errors(settings) -> list:
    """One line per role variable (name: value) that the unit, launcher or env file cannot carry."""
    errors = []
    for name, value in (settings or {}).items():
        text = "" if value is None else str(value)
        if name in UNIT_PATHS:
            if not SAFE_PATH.fullmatch(text) or "/../" in text + "/" or text.endswith("/.."):
                errors.append(f"{name} {text!r}: give an absolute path of letters, digits and . _ + - / only "
                              f"(the unit and the launcher name it; systemd would expand % and $ in it)")
        elif name in UNIT_NAMES:
            if not SAFE_ACCOUNT.fullmatch(text):
                errors.append(f"{name} {text!r}: give a user or group name of letters, digits, '_', '.' and '-'")
        else:
            problem = env_value_error(value)
            if problem:
                errors.append(f"{name} {problem}")
    return errors


_QUOTED = re.compile(r'([\\"$`])')


def systemd_env_quote(value) -> str:
    """One EnvironmentFile= value, double-quoted: backslash, double quote, dollar and backquote
    escaped with a backslash. systemd (241 and later, and earlier ones too) reads it back as the
    value itself, byte for byte; so does a POSIX shell that sources the file. Specifiers (`%`) are
    never expanded in an env file, so `%` stays as it is. A value holding a newline, CR or NUL is
    refused (instance_errors names it first; this is the last guard)."""
    text = "" if value is None else str(value)
    if any(c in text for c in "\n\r\0"):
        raise ValueError("systemd_env_quote: a value holding a newline, CR or NUL cannot be one env file line")
    return '"' + _QUOTED.sub(r"\\\1", text) + '"'


class FilterModule:
    def filters(self):
        return {
            "instance_errors": instance_errors,
            "instances_typed": instances_typed,
            "surge_leftovers": surge_leftovers,
            "surge_workers": surge_workers,
            "setting_errors": setting_errors,
            "systemd_env_quote": systemd_env_quote,
        }
