# Copyright: (c) 2025, dflash.deploy contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""module_utils/redact.py (round 3, M4): every API key value out of a journal's text, on the line real
SGLang 0.5.11 logs at every start (``server_args=ServerArgs(... api_key='...' ...)``), the fixture's dict
form, the launcher's flag and the env file's variable; what is not a key stays as it was."""
from __future__ import annotations

import pytest
from ansible_collections.dflash.deploy.plugins.module_utils.redact import redact

KEY = "RT3-KEY-VVV-5e1d"
SERVER_ARGS = (
    "[2026-12-07 10:14:02] server_args=ServerArgs(model_path='/var/lib/dflash/models/Qwen3-8B', "
    "tokenizer_path='/var/lib/dflash/models/Qwen3-8B', tokenizer_mode='auto', skip_tokenizer_init=False, "
    "load_format='auto', trust_remote_code=False, dtype='auto', kv_cache_dtype='auto', quantization=None, "
    "context_length=None, device='cuda', served_model_name='qwen3-8b-dflash', chat_template=None, "
    "is_embedding=False, revision=None, host='0.0.0.0', port=30001, nccl_port=None, "
    "mem_fraction_static=0.85, tp_size=1, stream_interval=1, random_seed=1234, log_level='info', "
    f"api_key='{KEY}', admin_api_key=None, file_storage_path='sglang_storage', enable_cache_report=False, "
    "speculative_algorithm='DFLASH', speculative_draft_model_path='/var/lib/dflash/models/dflash-draft', "
    "speculative_num_draft_tokens=16, attention_backend='fa3', sampling_backend='flashinfer')")


def test_the_server_args_line_of_real_sglang():
    out = redact(SERVER_ARGS)
    assert KEY not in out
    assert out == SERVER_ARGS.replace(f"api_key='{KEY}'", "api_key='***'")  # nothing else changed
    assert "admin_api_key=None" in out and "served_model_name='qwen3-8b-dflash'" in out


@pytest.mark.parametrize(("text", "expected"), [
    (f"server_args={{'model_path': '/m', 'api_key': '{KEY}', 'port': 30001}}",
     "server_args={'model_path': '/m', 'api_key': '***', 'port': 30001}"),
    (f'{{"api_key": "{KEY}", "port": 30001}}', '{"api_key": "***", "port": 30001}'),
    (f"SGLANG_API_KEY={KEY}", "SGLANG_API_KEY=***"),
    (f'SGLANG_API_KEY="{KEY} with space"', 'SGLANG_API_KEY="***"'),
    (f"exec python -m sglang.launch_server --api-key {KEY} --port 30001",
     "exec python -m sglang.launch_server --api-key *** --port 30001"),
    (f"--api-key={KEY}", "--api-key=***"),
    (f"--admin-api-key '{KEY}'", "--admin-api-key '***'"),
    (f"admin_api_key='{KEY}', x=1", "admin_api_key='***', x=1"),
    (f"api_key='it\\'s {KEY}'", "api_key='***'"),
    (f"Authorization: Bearer {KEY}", "Authorization: Bearer ***"),
    ("api_key=None, host='0.0.0.0'", "api_key=None, host='0.0.0.0'"),
    ("[2026-12-07 10:14:02] Load weight end. avail mem=61.80 GB",
     "[2026-12-07 10:14:02] Load weight end. avail mem=61.80 GB"),
])
def test_each_form_of_the_key(text, expected):
    assert redact(text) == expected


def test_lists_and_other_values():
    assert redact([f"api_key='{KEY}'", "plain"]) == ["api_key='***'", "plain"]
    assert redact(None) is None and redact(3) == 3
