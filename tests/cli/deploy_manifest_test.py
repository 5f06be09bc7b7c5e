"""Offline checks of the deployment files (docs/scale-out.md) against the
real binary and against each other, since no cluster or container daemon
runs here:

- deploy/k8s/kvfork-llm-d.yaml: the Deployment's kvfork arguments start a
  real server (tiny model, $(POD_IP) expanded as Kubernetes would) whose
  readiness and liveness probe paths answer 200 and whose /metrics carries
  vllm:cache_config_info with the block size the endpoint picker's
  precise-prefix-cache-scorer is configured with; the InferencePool selects
  the pod's labels on its container port; the engine-type label is vllm;
  --kv-events connects to the EPP Service's kv-events port and the topic is
  kv@<pod ip>@<served model name> with the scorer's topic filter.
- Dockerfile: non-root USER, HEALTHCHECK on /health, and its ENTRYPOINT + CMD
  start a real server."""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

import yaml

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from kvfork_test_env import KVFORK, QWEN_TOKENIZER, SRC, fail, free_port  # noqa: E402


def get(port, path):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, ""
    except OSError:
        return None, ""


def serve(args, port, paths, log):
    """Starts kvfork serve with args; returns /metrics once every path is 200."""
    p = subprocess.Popen([KVFORK, "serve"] + args, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if p.poll() is not None:
                log.flush()
                fail(f"kvfork serve {shlex.join(args)} exited {p.returncode}:\n"
                     + open(log.name).read()[-1500:])
            if all(get(port, path)[0] == 200 for path in paths):
                return get(port, "/metrics")[1]
            time.sleep(0.2)
        fail(f"kvfork serve {shlex.join(args)}: {paths} not 200 in 90 s")
    finally:
        p.terminate()
        p.wait(timeout=30)


def replace_flag(args, flag, value):
    out = [a for a in args if not a.startswith(flag + "=")]
    return out + [f"{flag}={value}"]


def main():
    docs = [d for d in yaml.safe_load_all(open(os.path.join(SRC, "deploy/k8s/kvfork-llm-d.yaml"))) if d]
    by = {(d["kind"], d["metadata"]["name"]): d for d in docs}
    dep = by[("Deployment", "kvfork")]
    pool = by[("InferencePool", "kvfork")]
    epp_cfg = yaml.safe_load(by[("ConfigMap", "kvfork-epp-config")]["data"]["epp-config.yaml"])
    epp_svc = by[("Service", "kvfork-epp")]
    pod = dep["spec"]["template"]
    labels = pod["metadata"]["labels"]
    c = pod["spec"]["containers"][0]
    args = c["args"]
    flags = dict(a[2:].split("=", 1) for a in args)
    port = c["ports"][0]["containerPort"]

    if labels.get("llm-d.ai/engine-type") != "vllm":
        fail("the pod has no llm-d.ai/engine-type: vllm label")
    for k, v in pool["spec"]["selector"]["matchLabels"].items():
        if labels.get(k) != v:
            fail(f"the InferencePool selects {k}={v}, the pod has {labels.get(k)}")
    if [t["number"] for t in pool["spec"]["targetPorts"]] != [port] or int(flags["port"]) != port:
        fail("InferencePool targetPorts, containerPort and --port disagree")
    if pool["spec"]["endpointPickerRef"]["name"] != epp_svc["metadata"]["name"]:
        fail("endpointPickerRef does not name the EPP Service")
    scorer = next(p for p in epp_cfg["plugins"] if p["type"] == "precise-prefix-cache-scorer")
    params = scorer["parameters"]
    if params["tokenProcessorConfig"]["blockSize"] != int(flags["kv-block-size"]):
        fail("the scorer's blockSize is not --kv-block-size")
    m = re.fullmatch(r"tcp://([^:]+):(\d+)", flags["kv-events"])
    if not m or "*" in m.group(1):
        fail(f"--kv-events {flags['kv-events']} must connect (no '*') to the EPP")
    svc_ports = {p["name"]: p["port"] for p in epp_svc["spec"]["ports"]}
    if (not m.group(1).startswith(epp_svc["metadata"]["name"] + ".") or int(m.group(2)) != svc_ports["kv-events"]
            or not params["kvEventsConfig"]["zmqEndpoint"].endswith(":" + m.group(2))):
        fail("--kv-events does not reach the EPP Service's kv-events port the scorer binds")
    topic = flags["kv-events-topic"]
    if topic != f"kv@$(POD_IP)@{flags['served-model-name']}" or not topic.startswith(
            params["kvEventsConfig"]["topicFilter"]):
        fail(f"topic {topic} is not kv@$(POD_IP)@<served model name> under the scorer's filter")
    if flags["served-model-name"] != labels["llm-d.ai/model"]:
        fail("--served-model-name differs from the llm-d.ai/model label")
    probes = [c["readinessProbe"]["httpGet"]["path"], c["livenessProbe"]["httpGet"]["path"],
              c["startupProbe"]["httpGet"]["path"]]
    if probes[0] != "/health" or probes[2] != "/health":
        fail("readiness/startup probes are not /health")

    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "tiny")
        p = subprocess.run([KVFORK, "make-model", "--arch", "qwen3", "--shape", "tiny", "--seed", "2",
                            "--tokenizer", QWEN_TOKENIZER,
                            "--out", model], capture_output=True, text=True)
        if p.returncode != 0:
            fail("make-model: " + p.stderr[-1000:])
        log = open(os.path.join(tmp, "serve.log"), "w")
        # As Kubernetes runs it, with the model, a free port and fewer threads.
        local = [a.replace("$(POD_IP)", "10.1.2.3") for a in args]
        hp = free_port()
        local = replace_flag(replace_flag(replace_flag(replace_flag(local, "--model", model), "--port", str(hp)),
                                          "--host", "127.0.0.1"), "--threads", "1")
        local = replace_flag(local, "--kv-cache-mib", "64")
        metrics = serve(local, hp, probes, log)
        want = f'vllm:cache_config_info{{block_size="{flags["kv-block-size"]}"'
        if want not in metrics or "kvfork_kv_events_published_total" not in metrics:
            fail(f"/metrics lacks {want} or the KV-event counters")

        dockerfile = open(os.path.join(SRC, "Dockerfile")).read()
        if not re.search(r"^USER (?!root|0\b)\S+", dockerfile, re.M):
            fail("the Dockerfile runs as root")
        if not re.search(r"^HEALTHCHECK .*\n?.*CMD curl -fsS http://127\.0\.0\.1:(\d+)/health", dockerfile, re.M):
            fail("the Dockerfile has no HEALTHCHECK on /health")
        cmd = yaml.safe_load(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
        entry = yaml.safe_load(re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M).group(1))
        if entry[-1] != "serve":
            fail("ENTRYPOINT is not kvfork serve")
        hp = free_port()
        docker_args = []
        it = iter(cmd)
        for a in it:
            v = next(it)
            docker_args += [a, {"--model": model, "--port": str(hp), "--host": "127.0.0.1"}.get(a, v)]
        serve(docker_args + ["--threads", "1", "--kv-cache-mib", "64"], hp, ["/health"], log)
        log.close()
    print("PASS")


if __name__ == "__main__":
    main()
