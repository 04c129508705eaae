"""Dynamic scenarios: the seeded generator's bounds, the event formats, the sampled trace."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from clitools import run_module

from formulation.instance import Instance
from formulation.scenario import Event, EventKind, Scenario
from formulation.schema import InputError
from instances.scenarios import ScenarioSettings, generate_scenario

RICH = ScenarioSettings(hours=12, node_failures_per_domain_hour=0.5,
                        domain_failures_per_domain_hour=0.2, joins=1)


def test_the_same_seed_gives_the_same_bytes(generated: Instance):
    one, two = (generate_scenario(generated, 5, RICH) for _ in range(2))
    assert json.dumps(one.to_dict()) == json.dumps(two.to_dict())
    assert one.to_csv() == two.to_csv()
    assert generate_scenario(generated, 6, RICH).to_csv() != one.to_csv()


def test_generated_events_keep_the_sponsors_bounds(generated: Instance):
    scenario = generate_scenario(generated, 1, RICH)
    by_kind = {kind: [e for e in scenario.events if e.kind is kind] for kind in EventKind}
    assert all(by_kind[kind] for kind in EventKind), "12 h at these rates draw every kind"
    assert [e.time_s for e in scenario.events] == sorted(e.time_s for e in scenario.events)
    assert all(0 < e.time_s < scenario.horizon_s for e in scenario.events)
    assert all(0.7 <= e.value <= 1.3 for e in by_kind[EventKind.BANDWIDTH])
    spikes = by_kind[EventKind.LATENCY]
    assert all(e.value >= 1.5 and 5 <= e.duration_s <= 300 for e in spikes)
    free = generated.free_gpus
    gpus = np.array([d.gpus for d in generated.domains])
    for e in by_kind[EventKind.LOAD]:
        assert 0.8 <= e.value <= 1.2 and e.value * free[e.domain] <= gpus[e.domain] + 1e-9
    links = generated.links.bandwidth_gbps
    assert all(links[e.domain, e.peer] > 0 for e in by_kind[EventKind.BANDWIDTH] + spikes)
    assert len(by_kind[EventKind.DOMAIN_JOIN]) == 1
    assert by_kind[EventKind.DOMAIN_JOIN][0].time_s <= scenario.horizon_s / 2


def test_json_and_csv_hold_the_same_scenario(generated: Instance, tmp_path: Path):
    scenario = generate_scenario(generated, 2, RICH)
    (tmp_path / "s.json").write_text(json.dumps(scenario.to_dict()))
    (tmp_path / "s.csv").write_text(scenario.to_csv())
    from_json = Scenario.load(tmp_path / "s.json", generated)
    from_csv = Scenario.load(tmp_path / "s.csv", generated)
    assert from_json == scenario == from_csv
    assert from_json.provenance == scenario.provenance


def test_the_sampled_trace_by_hand(hand_instance: Instance):
    """alpha: 64 GPUs, 32 free; beta: 64, 16 free; gamma: 32, 32 free; samples every 60 s."""
    events = [
        Event(90.0, EventKind.BANDWIDTH, 0, 1, 0.8),
        Event(150.0, EventKind.BANDWIDTH, 0, 1, 1.1),
        Event(60.0, EventKind.LATENCY, 1, 2, 2.0, 100.0),  # samples 60 and 120 s
        Event(120.0, EventKind.LOAD, 0, value=1.5),  # 48 free
        Event(180.0, EventKind.NODE_FAILURE, 0, value=24, duration_s=60.0),  # 48 - 24 free
        Event(60.0, EventKind.DOMAIN_FAILURE, 2, duration_s=60.0),
        Event(120.0, EventKind.DOMAIN_JOIN, 1),
    ]
    trace = Scenario.of(300.0, events).to_trace(hand_instance, 60.0)
    assert trace.length == 5
    assert trace.bandwidth_factor[:, 0, 1].tolist() == [1.0, 1.0, 0.8, 1.1, 1.1]
    assert trace.bandwidth_factor[:, 1, 0].tolist() == [1.0] * 5  # the other direction
    assert trace.latency_factor[:, 1, 2].tolist() == [1.0, 2.0, 2.0, 1.0, 1.0]
    free = np.array([trace.free_gpu_factor_at(i) for i in range(5)]) * [32, 16, 32]
    assert free[:, 0].tolist() == [32, 32, 48, 24, 48]
    assert free[:, 1].tolist() == [0, 0, 16, 16, 16]
    assert free[:, 2].tolist() == [32, 0, 32, 32, 32]


@pytest.mark.parametrize(("row", "needle"), [
    ("10,flood,0,,1.0,", "kind must be one of"),
    ("10,load,7,,1.0,", "domain"),
    ("10,latency,0,1,0.5,10", "value"),
    ("10,latency,0,1,2.0,", "duration_s is missing"),
    ("10,load,0,1,1.0,", "peer is not used"),
    ("10,bandwidth,0,0,1.0,", "no link 0 -> 0"),
    ("10,node_failure,0,,1.5,60", "value"),
    ("99999,load,0,,1.0,", "time_s"),
    ("x,load,0,,1.0,", "time_s"),
])
def test_bad_csv_rows_give_one_line_naming_the_line_and_field(
        hand_instance: Instance, row: str, needle: str):
    text = f"# horizon_s=3600\ntime_s,kind,domain,peer,value,duration_s\n{row}\n"
    with pytest.raises(InputError, match="line 3") as caught:
        Scenario.from_csv(text, hand_instance, "s.csv")
    assert needle in str(caught.value) and "\n" not in str(caught.value)


def test_the_cli_writes_whole_files_and_refuses_bad_input(tmp_path: Path, write_json):
    instance = tmp_path / "instance.json"
    done = run_module("instances.generate", "--domains", "4", "--model", "7b", "--seed", "3",
                      "--out", instance)
    assert done.returncode == 0, done.stderr
    out = tmp_path / "s.csv"
    done = run_module("instances.scenarios", instance, "--out", out, "--hours", "2",
                      "--seed", "4", "--joins", "1")
    assert done.returncode == 0, done.stderr
    assert "events over 2 h" in done.stdout
    loaded = Scenario.load(out, Instance.load(instance))
    assert loaded.horizon_s == 7200 and loaded.events
    for args, needle in (([instance, "--out", instance], "input of this run"),
                         ([instance, "--out", tmp_path / "x.json", "--joins", "4"], "joins"),
                         ([tmp_path / "none.json", "--out", tmp_path / "y.json"], "none.json"),
                         ([instance, "--out", tmp_path / "z.txt"], ".json or .csv")):
        done = run_module("instances.scenarios", *args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert needle in done.stderr
    assert not any((tmp_path / name).exists() for name in ("x.json", "y.json", "z.txt"))


def test_short_events_mark_the_interval_they_fall_in_and_boundaries_are_exact(
        hand_instance: Instance):
    events = [Event(70.0, EventKind.LATENCY, 0, 1, 3.0, 30.0),  # inside [60, 120)
              Event(2.1, EventKind.BANDWIDTH, 1, 2, 0.9)]  # 2.1 / 0.7 = 3.0000000000000004
    assert Scenario.of(180.0, events).to_trace(hand_instance, 60.0) \
        .latency_factor[:, 0, 1].tolist() == [1.0, 3.0, 1.0]
    fine = Scenario.of(4.2, events).to_trace(hand_instance, 0.7)
    assert fine.bandwidth_factor[:, 1, 2].tolist() == [1.0, 1.0, 1.0, 0.9, 0.9, 0.9]
    with pytest.raises(InputError, match="interval_s"):
        Scenario.of(60.0, events).to_trace(hand_instance, 0.0)


def test_a_domain_with_no_free_gpu_reads_back(generated: Instance, tmp_path: Path):
    domains = (dataclasses.replace(generated.domains[0], free_gpus=0), *generated.domains[1:])
    busy = generated.replace(domains=domains)
    scenario = generate_scenario(busy, 0, ScenarioSettings(hours=3))
    assert all(e.value <= 1.0 for e in scenario.events
               if e.kind is EventKind.LOAD and e.domain == 0)
    (tmp_path / "s.csv").write_text(scenario.to_csv())
    assert Scenario.load(tmp_path / "s.csv", busy) == scenario


@pytest.mark.parametrize(("document", "needle"), [
    ({"schema": "xdsched.scenario/1", "horizon_s": -1, "events": []}, "horizon_s"),
    ({"schema": "xdsched.scenario/1", "horizon_s": 10, "events": [], "x": 1}, "x is not"),
    ({"schema": "xdsched.scenario/1", "horizon_s": 10 ** 400, "events": []}, "horizon_s"),
    ({"schema": "xdsched.scenario/1", "horizon_s": 10,
      "events": [{"time_s": 1, "kind": "load", "domain": 10 ** 400, "value": 1}]}, "domain"),
    ([], "must be an object"),
    # link factors that take a link past what an instance may state (1e308: inf Gbit/s)
    ({"schema": "xdsched.scenario/1", "horizon_s": 10, "events": [
        {"time_s": 1, "kind": "bandwidth", "domain": 0, "peer": 1, "value": 1e308}]},
     "events[0].value: 1e+308 x the link's"),
    ({"schema": "xdsched.scenario/1", "horizon_s": 10, "events": [
        {"time_s": 1, "kind": "bandwidth", "domain": 0, "peer": 1, "value": 1e-300}]},
     "outside [0.001, 1e+06]"),
    ({"schema": "xdsched.scenario/1", "horizon_s": 10, "events": [
        {"time_s": 1, "kind": "latency", "domain": 0, "peer": 1, "value": 1e12,
         "duration_s": 5}]}, "events[0].value: 1e+12 x the link's"),
])
def test_bad_json_names_the_file_in_one_line(hand_instance: Instance, document, needle: str):
    with pytest.raises(InputError) as caught:
        Scenario.from_dict(document, hand_instance, "s.json")
    message = str(caught.value)
    assert message.startswith("s.json: ") and needle in message and "\n" not in message


def test_csv_line_numbers_count_blank_lines_and_a_horizon_is_required(hand_instance: Instance):
    text = "# horizon_s=100\ntime_s,kind,domain,peer,value,duration_s\n\n1,load,0,,1.0,\n\n" \
           "2,load,9,,1.0,\n"
    with pytest.raises(InputError, match="line 6: domain"):
        Scenario.from_csv(text, hand_instance, "s.csv")
    with pytest.raises(InputError, match="line 1: expected '# horizon_s"):
        Scenario.from_csv("time_s,kind,domain,peer,value,duration_s\n", hand_instance, "s.csv")


def test_a_scenario_drawn_on_an_instance_at_the_link_limits_reads_back(
        hand_instance: Instance, tmp_path: Path):
    """The generator keeps its link factors within what the reader accepts (an instance's
    link limits), so that its scenarios replay on any valid instance."""
    bandwidth = np.full((3, 3), 0.001)
    bandwidth[0, 1] = 1e6
    latency = np.full((3, 3), 5e5)
    edge = hand_instance.with_link_state(bandwidth_gbps=bandwidth, latency_ms=latency)
    scenario = generate_scenario(edge, 1, ScenarioSettings(hours=24))
    kinds = {e.kind for e in scenario.events}
    assert {EventKind.BANDWIDTH, EventKind.LATENCY} <= kinds
    path = tmp_path / "s.json"
    path.write_text(json.dumps(scenario.to_dict()))
    assert Scenario.load(path, edge) == scenario
    assert all(e.value <= 2.0 for e in scenario.events if e.kind is EventKind.LATENCY)
