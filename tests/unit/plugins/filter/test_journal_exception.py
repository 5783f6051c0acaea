"""journal_exception: the exception line of a failed server's journal, SGLang's timestamped lines included."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_spec = importlib.util.spec_from_file_location(
    "dflash_journal_filter", Path(__file__).resolve().parents[4] / "plugins" / "filter" / "journal_exception.py")
mod = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mod)

# What `journalctl -o cat -u sglang-dflash@qwen3-8b.service` shows when a scheduler dies: SGLang's
# own lines carry "[date time]" or "[date time TP0]", the traceback's lines after the first none.
SCHEDULER_DIED = """\
[2026-12-01 11:40:02] server_args=ServerArgs(model_path='/srv/models/Qwen3-8B', tp_size=1, port=30001)
[2026-12-01 11:40:05 TP0] Init torch distributed begin.
[2026-12-01 11:40:09 TP0] Load weight begin. avail mem=78.12 GB
[2026-12-01 11:40:12 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File ".../site-packages/sglang/srt/managers/scheduler.py", line 2701, in run_scheduler_process
    scheduler = Scheduler(server_args, port_args, gpu_id, tp_rank, moe_ep_rank, pp_rank, dp_rank)
  File ".../site-packages/sglang/srt/speculative/dflash_worker.py", line 88, in __init__
    raise RuntimeError("DFlash worker: draft KV cache layout mismatch")
RuntimeError: DFlash worker: draft KV cache layout mismatch

[2026-12-01 11:40:12] Received sigquit from a child process. It usually means the child failed.
"""


@pytest.mark.parametrize(("line", "expected"), [
    # SGLang's logger, the plain and the per-rank prefix
    ("[2026-12-01 11:40:12] ImportError: cannot import name 'x' from 'sgl_kernel'",
     "ImportError: cannot import name 'x' from 'sgl_kernel'"),
    ("[2026-12-01 11:40:12 TP0] ValueError: invalid speculative_algorithm 'DFLASH2'",
     "ValueError: invalid speculative_algorithm 'DFLASH2'"),
    ("[2026-12-01 11:40:12 DP1 TP3 EP3] torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
     "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"),
    ("[2026-12-01 11:40:12.123 TP0] KeyError: 'dflash'", "KeyError: 'dflash'"),
    # a logged message that carries the exception after a colon, on one line
    ("[2026-12-01 11:40:12 TP0] Scheduler hit an exception: RuntimeError: CUDA error: an illegal memory access "
     "was encountered", "RuntimeError: CUDA error: an illegal memory access was encountered"),
    # what Python prints itself (no prefix): the last line of a traceback, dotted names, no message
    ("sglang.srt.cuda_driver.CudaDriverError: CUDA driver call cuInit failed: CUDA_ERROR_NO_DEVICE (100)",
     "sglang.srt.cuda_driver.CudaDriverError: CUDA driver call cuInit failed: CUDA_ERROR_NO_DEVICE (100)"),
    ("OSError: [Errno 30] Read-only file system: '/var/cache/dflash/qwen3-8b/triton'",
     "OSError: [Errno 30] Read-only file system: '/var/cache/dflash/qwen3-8b/triton'"),
    ("Exception: weights missing", "Exception: weights missing"),
    ("KeyboardInterrupt", "KeyboardInterrupt"),
    ("RuntimeError: boom\r\n", "RuntimeError: boom"),
    # not exception lines
    ("[2026-12-01 11:40:12 TP0] Scheduler hit an exception: Traceback (most recent call last):", ""),
    ("Traceback (most recent call last):", ""),
    ('  File "/x/scheduler.py", line 2701, in run_scheduler_process', ""),
    ('    raise RuntimeError("DFlash worker: x")', ""),
    ("    RuntimeError: an indented line is a frame's source, not the exception", ""),
    ("[2026-12-01 11:40:12] Received sigquit from a child process. It usually means the child failed.", ""),
    ("[2026-12-01 11:40:12 TP0] Load weight end. type=Qwen3ForCausalLM, avail mem=61.80 GB, mem usage=16.32 GB.", ""),
    ("The above exception was the direct cause of the following exception:", ""),
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30001): address already in use", ""),
    ("[2026-12-01 11:40:12 TP0] Exception in thread Thread-3 (watchdog):", ""),
    ("", ""),
])
def test_one_line(line, expected):
    assert mod.exception_in_line(line) == expected


def test_the_traceback_after_a_tp0_line_gives_its_last_line():
    assert mod.journal_exception(SCHEDULER_DIED.splitlines()) == \
        "RuntimeError: DFlash worker: draft KV cache layout mismatch"


def test_the_regex_the_task_had_missed_every_timestamped_line():
    """What the role matched before: only lines that begin with the class name."""
    import re
    old = re.compile(r"^[A-Za-z_.]*(Error|Exception|Interrupt)\b.*:")
    line = "[2026-12-01 11:40:12] ImportError: cannot import name 'x' from 'sgl_kernel'"
    assert not old.match(line)
    assert mod.journal_exception(["[2026-12-01 11:40:10] Starting", line]) == \
        "ImportError: cannot import name 'x' from 'sgl_kernel'"


def test_the_last_exception_wins_and_later_plain_lines_do_not_clear_it():
    lines = ["[2026-12-01 11:40:10 TP0] ValueError: first",
             "[2026-12-01 11:40:11 TP0] Scheduler hit an exception: RuntimeError: second",
             "[2026-12-01 11:40:12] Received sigquit from a child process. It usually means the child failed.",
             "Killed"]
    assert mod.journal_exception(lines) == "RuntimeError: second"


def test_a_chained_traceback_gives_the_outermost_exception():
    lines = ["Traceback (most recent call last):", '  File "a.py", line 1, in <module>',
             "ModuleNotFoundError: No module named 'sgl_kernel.flash_attn'", "",
             "During handling of the above exception, another exception occurred:", "",
             "Traceback (most recent call last):", '  File "b.py", line 9, in <module>',
             "ImportError: cannot import name 'min_p_sampling_from_probs' from 'sgl_kernel'"]
    assert mod.journal_exception(lines) == lines[-1]


@pytest.mark.parametrize("nothing", [[], None, "", ["[2026-12-01 11:40:02] Started", "INFO:     Uvicorn running"]])
def test_no_exception_is_the_empty_string(nothing):
    assert mod.journal_exception(nothing) == ""


def test_one_text_is_read_as_its_lines():
    assert mod.journal_exception(SCHEDULER_DIED) == "RuntimeError: DFlash worker: draft KV cache layout mismatch"


def test_the_filter_is_registered():
    assert mod.FilterModule().filters()["journal_exception"] is mod.journal_exception


# -- a port someone else holds (round 3, N7) and the key in the journal (M4) ---------------------------

SERVER_ARGS = (
    "[2026-12-07 10:14:02] server_args=ServerArgs(model_path='/var/lib/dflash/models/Qwen3-8B', "
    "tokenizer_path='/var/lib/dflash/models/Qwen3-8B', tokenizer_mode='auto', skip_tokenizer_init=False, "
    "load_format='auto', trust_remote_code=False, dtype='auto', host='0.0.0.0', port=30001, "
    "api_key='RT3-KEY-VVV-5e1d', admin_api_key=None, served_model_name='qwen3-8b-dflash', "
    "speculative_algorithm='DFLASH', speculative_draft_model_path='/var/lib/dflash/models/dflash-draft', "
    "attention_backend='fa3', mem_fraction_static=0.85)")
BIND_FAILED = [
    SERVER_ARGS,
    "[2026-12-07 10:16:40] INFO:     Started server process [4811]",
    "[2026-12-07 10:16:40] ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30001): "
    "address already in use",
    "[2026-12-07 10:16:41] Received sigquit from a child process. It usually means the child failed.",
    "RuntimeError: the tokenizer manager exited (api_key='RT3-KEY-VVV-5e1d')",
]


@pytest.mark.parametrize(("line", "expected"), [
    ("ERROR:    [Errno 98] error while attempting to bind on address ('0.0.0.0', 30001): address already in use",
     "port 30001 is already in use (held by another process): [Errno 98] error while attempting to bind on "
     "address ('0.0.0.0', 30001): address already in use"),
    ("[2026-12-07 10:16:40 TP0] OSError: [Errno 98] Address already in use",
     "its port is already in use (held by another process): OSError: [Errno 98] Address already in use"),
    ("[2026-12-07 10:16:40] the port 30002 is not free: address already in use",
     "port 30002 is already in use (held by another process): the port 30002 is not free: address already in use"),
    ("OSError: [Errno 30] Read-only file system: '/var/cache/dflash/qwen3-8b/triton'", ""),
    ("[2026-12-07 10:16:40] Uvicorn running on http://0.0.0.0:30001", ""),
])
def test_errno_98_is_recognised(line, expected):
    assert mod.address_in_use(line) == expected


def test_a_port_taken_during_the_restart_is_named_over_the_teardown_and_redacted():
    """The bind failure is why the server died, not the teardown after it; the key in the journal
    (the server's arguments, and here an exception line carrying it) never reaches the answer."""
    assert mod.journal_exception(BIND_FAILED) == (
        "port 30001 is already in use (held by another process): [Errno 98] error while attempting to bind on "
        "address ('0.0.0.0', 30001): address already in use")
    last = mod.journal_exception(BIND_FAILED[:2] + BIND_FAILED[3:])
    assert last == "RuntimeError: the tokenizer manager exited (api_key='***')"
    assert "RT3-KEY" not in last


def test_the_redact_filter_is_registered():
    assert mod.FilterModule().filters()["redact_secrets"](SERVER_ARGS).count("api_key='***'") == 1


# What real sglang 0.5.11 wrote to its journal on a GPU host (2026-12-07) when the deploy gave it an
# argument its parser refuses: the usage, then argparse's error line, and the process exits 2.
ARGS_REFUSED = """\
sglang-dflash@tiny: release d3db1f242f6a07dd
usage: launch_server.py [-h] --model-path MODEL_PATH [--tokenizer-path TOKENIZER_PATH]
                        [--kv-cache-dtype {auto,fp8_e5m2,fp8_e4m3,bf16,bfloat16,fp4_e2m1}]
launch_server.py: error: argument --kv-cache-dtype: invalid choice: 'no_such_dtype' (choose from auto, fp8_e5m2)
"""


def test_argparse_refusing_the_command_line_is_named():
    assert mod.journal_exception(ARGS_REFUSED) == (
        "the server refused its arguments: launch_server.py: error: argument --kv-cache-dtype: invalid choice: "
        "'no_such_dtype' (choose from auto, fp8_e5m2)")


@pytest.mark.parametrize("line", [
    "sglang: error: unrecognized arguments: --no-such-flag",
    "[2026-12-07 10:00:00] launch_server.py: error: the following arguments are required: --model-path",
])
def test_argparse_error_lines(line):
    assert mod.arguments_refused(line).startswith("the server refused its arguments: ")


@pytest.mark.parametrize("line", [
    "RuntimeError: error: argument x",  # an exception line, not argparse's
    "  launch_server.py: error: argument --x: indented",
    "[2026-12-07 10:00:00] Scheduler: error: something else went wrong",
    "usage: launch_server.py [-h]",
])
def test_lines_that_are_not_argparse_refusals(line):
    assert mod.arguments_refused(line) == ""
