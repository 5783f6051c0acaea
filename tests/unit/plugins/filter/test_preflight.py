"""preflight filter: preflight_info's options per instance, and whose processes preflight refuses."""
from __future__ import annotations

from ansible_collections.dflash.deploy.plugins.filter import preflight as mod

GPUS = [  # pkg_probe's list: nvidia-smi's index and the processes it lists on each GPU
    {"index": 0, "processes": [{"pid": 4242, "name": "python3"}]},
    {"index": 1, "processes": [{"pid": 5151}, {"pid": "[Not Found]"}, {"pid": True}]},
    {"index": 2, "processes": []},
    {"index": 3},
]


def inst(name, gpus, port=30001, **kw):
    return {"name": name, "gpus": gpus, "port": port, "model_path": "/srv/models/Qwen3-8B",
            "draft_model_path": "/srv/models/Qwen3-8B-DFlash-b16", "model_controller_dir": "",
            "draft_model_controller_dir": "", **kw}


def test_the_request_names_each_instance_s_unit_port_gpu_processes_and_model_directories():
    req = mod.preflight_request([inst("qwen3-8b", [1], 30001), inst("probe", [0, 2, 3], 30002)], GPUS,
                                "/opt/dflash", "sglang")
    assert req == {
        "base_dir": "/opt/dflash", "service_user": "sglang",
        "units": {"qwen3-8b": "sglang-dflash@qwen3-8b.service", "probe": "sglang-dflash@probe.service"},
        "ports": {"qwen3-8b": 30001, "probe": 30002},
        # integer pids only: nvidia-smi prints "[Not Found]" for a process it cannot name
        "pids": {"qwen3-8b": [5151], "probe": [4242]},
        "models": {"qwen3-8b": ["/srv/models/Qwen3-8B", "/srv/models/Qwen3-8B-DFlash-b16"],
                   "probe": ["/srv/models/Qwen3-8B", "/srv/models/Qwen3-8B-DFlash-b16"]},
    }


def test_no_instances_or_no_gpus_ask_nothing_about_them():
    assert mod.preflight_request([], GPUS, "/opt/dflash", "sglang")["units"] == {}
    assert mod.preflight_request([inst("a", [1])], None, "/opt/dflash", "sglang")["pids"] == {"a": []}


def test_a_directory_staged_from_the_controller_is_not_asked_for():
    staged_model = inst("a", [1], model_controller_dir="/ctl/qwen")
    staged_draft = inst("b", [2], draft_model_controller_dir="/ctl/draft")
    no_draft = inst("c", [3], draft_model_path="")
    req = mod.preflight_request([staged_model, staged_draft, no_draft], GPUS, "/opt/dflash", "sglang")
    assert req["models"] == {"a": ["/srv/models/Qwen3-8B-DFlash-b16"], "b": ["/srv/models/Qwen3-8B"],
                             "c": ["/srv/models/Qwen3-8B"]}


def test_holders_other_than_the_instance_s_own_unit_are_foreign_and_described():
    holders = [{"pid": 4242, "comm": "python3", "unit": "ddtree-stopgap.service"},
               {"pid": 5151, "comm": "python3", "unit": "sglang-dflash@qwen3-8b.service"},
               {"pid": 6161, "comm": "llama", "unit": None}]
    foreign = mod.foreign_holders(holders, "qwen3-8b")
    assert [h["pid"] for h in foreign] == [4242, 6161]
    assert mod.holder_lines(foreign) == ["python3 (pid 4242, ddtree-stopgap.service)", "llama (pid 6161, no unit)"]
    # another instance's unit is foreign too: a GPU is never shared by two instances unasked
    assert [h["pid"] for h in mod.foreign_holders(holders, "probe")] == [4242, 5151, 6161]
    assert mod.foreign_holders(None, "x") == [] and mod.holder_lines([]) == []


def test_another_service_s_ports_are_asked_about_under_their_name_with_its_unit():
    router = {"name": "the router of 'qwen3-8b-dflash' (port)", "port": 30100,
              "unit": "sglang-router@qwen3-8b-dflash.service"}
    req = mod.preflight_request([inst("qwen3-8b", [1], 30001)], GPUS, "/opt/dflash", "sglang", [router])
    assert req["ports"] == {"qwen3-8b": 30001, router["name"]: 30100}
    assert req["units"][router["name"]] == "sglang-router@qwen3-8b-dflash.service"
    assert req["pids"][router["name"]] == [] and req["models"][router["name"]] == []


def test_a_port_held_by_the_service_s_own_unit_is_not_foreign_but_an_instance_s_unit_is():
    holders = [{"pid": 1, "comm": "python3", "unit": "sglang-router@m.service"},
               {"pid": 2, "comm": "python3", "unit": "sglang-dflash@m.service"}]
    assert mod.foreign_holders(holders, "the router of 'm' (port)", "sglang-router@m.service") == [holders[1]]
    assert mod.foreign_holders(holders, "m") == [holders[0]]
