"""The environment record is uploaded as a CI artifact: canary secrets planted in the environment
that `python -m matrix env` reads must appear nowhere in what it writes, and ordinary values must
stay as they were."""

import json
import string

import pytest
from hypothesis import given
from hypothesis import strategies as st

from matrix.host.classify import REDACTED, names_of, redact, scrub

# Each canary's secret part is unique, so finding it anywhere in the record is a leak.
CANARIES = {
    "VLLM_CANARY_DB": ("postgres://canaryuser:Canary5ecretPw@db.internal/x", "Canary5ecretPw"),
    "VLLM_CANARY_USER": ("https://canarytokenuser@git.example.com/repo.git", "canarytokenuser"),
    "VLLM_CANARY_S3": (
        "https://bucket.s3.amazonaws.com/m.bin?X-Amz-Credential=x&X-Amz-Signature=c4nary0s1gnature",
        "c4nary0s1gnature",
    ),
    "VLLM_CANARY_SAS": ("https://a.blob.core.windows.net/c/m?sv=1&sig=CanarySasSig&token=CanaryTok", "CanarySas"),
    "VLLM_CANARY_GH": ("ghp_C4naryGitHubTokenC4naryGitHubToken01", "C4naryGitHubToken"),
    "VLLM_CANARY_PAT": ("github_pat_11C4NARY0000_CanaryFineGrainedPat01", "CanaryFineGrainedPat"),
    "CUDA_CANARY_HF": ("--token hf_C4naryHuggingFaceTokenC4naryHF", "C4naryHuggingFace"),
    "TORCH_CANARY_AWS": ("AKIAC4NARYC4NARY0123", "C4NARYC4NARY"),
    "VLLM_CANARY_B64": ("key=Xq7ZpL2mRt9WcV4kNb8HsJ3fYd6GaE1u", "Xq7ZpL2mRt9WcV4kNb8HsJ3fYd6GaE1u"),
    "VLLM_CANARY_JWT": (
        "Bearer eyJhbGciOiJIUzI1NiJ9.eyJjYW5hcnkiOiJ5ZXMifQ.c4naryJwtSignatureC4naryJwtSig",
        "c4naryJwtSignature",
    ),
    "VLLM_CANARY_HOME": ("/home/canaryalice/.cache/vllm", "canaryalice"),
    "HIP_CANARY_MAC": ("/Users/canarybob/models", "canarybob"),
    "ROCM_CANARY_WIN": (r"C:\Users\canarycarol\AppData\vllm", "canarycarol"),
}
ORDINARY = {
    "VLLM_WSL2_ENABLE_PIN_MEMORY": "1",
    "CUDA_VISIBLE_DEVICES": "0",
    "NVIDIA_VISIBLE_DEVICES": "GPU-5f1c9b7e-3a2d-4c1e-9f0a-1b2c3d4e5f60",
    "VLLM_COMMIT": "726934d87048d92e76da8934d9ae3534640bae3d",
    "VLLM_REPO_URL": "https://github.com/vllm-project/vllm",
    "VLLM_ATTENTION_BACKEND": "FLASH_ATTN",
    "VLLM_TEST_MODEL": "meta-llama/Meta-Llama-3-70B-Instruct",
    "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True,max_split_size_mb:128",
    "TORCH_CUDA_ARCH_LIST": "8.0;8.6;9.0+PTX",
    "CUDA_HOME": "/usr/local/cuda-12.8",
    "RUNNER_TOOL_CACHE": "/opt/hostedtoolcache",
}


@pytest.mark.reads_host
def test_no_canary_reaches_the_record_and_ordinary_values_stay(cli, tmp_path):
    out = tmp_path / "env.json"
    planted = {name: value for name, (value, _) in CANARIES.items()}
    done = cli("env", "--out", str(out), env={**planted, **ORDINARY})
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    leaked = [name for name, (_, secret) in CANARIES.items() if secret in text or secret in done.stderr]
    assert leaked == []
    recorded = json.loads(text)["environment"]
    assert {name: recorded[name] for name in ORDINARY} == ORDINARY
    # What is left of a redacted value still says what it was.
    assert recorded["VLLM_CANARY_DB"] == f"postgres://{REDACTED}@db.internal/x"
    assert recorded["VLLM_CANARY_S3"].startswith("https://bucket.s3.amazonaws.com/m.bin?X-Amz-Credential=")
    assert recorded["VLLM_CANARY_HOME"] == "~/.cache/vllm"
    assert recorded["ROCM_CANARY_WIN"] == r"~\AppData\vllm"


@pytest.mark.reads_host
def test_this_machines_home_is_shown_as_a_tilde_wherever_it_is(cli, tmp_path):
    home = tmp_path / "canary-home-dave"
    home.mkdir()
    done = cli("env", env={"HOME": str(home), "VLLM_CACHE_ROOT": f"{home}/.cache/vllm", "VLLM_LIST": f"a:{home}"})
    assert done.returncode == 0, done.stderr
    assert "canary-home-dave" not in done.stdout
    recorded = json.loads(done.stdout)["environment"]
    assert (recorded["VLLM_CACHE_ROOT"], recorded["VLLM_LIST"]) == ("~/.cache/vllm", "a:~")


tokens = st.text(string.ascii_letters + string.digits, min_size=36, max_size=40)


@pytest.mark.parametrize("name", ["CUDA_PASSWD", "NVIDIA_API_PRIVATE", "TORCH_PAT", "VLLM_COOKIE", "HIP_DB_PASS"])
def test_a_variable_named_as_a_secret_is_redacted_whole(name):
    assert redact({name: "Canary5ecret", "TORCH_PATH_X": "/opt/torch"}) == {
        name: REDACTED,
        "TORCH_PATH_X": "/opt/torch",
    }


@pytest.mark.parametrize(
    ("value", "kept"),
    [
        ("Authorization: Bearer Canary5ecret", "Authorization: Bearer <redacted>"),
        ("--password Canary5ecret --port 80", "--password <redacted> --port 80"),
        ("--db-pass=Canary5ecret", "--db-pass=<redacted>"),
        ("user=a pass=Canary5ecret;x=1", "user=a pass=<redacted>;x=1"),
        ("api_key: Canary5ecret", "api_key: <redacted>"),
        ("--max-num-batched-tokens 8192 --passes 2", "--max-num-batched-tokens 8192 --passes 2"),
    ],
)
def test_a_secret_inside_a_value_is_redacted_by_its_place_and_the_rest_kept(value, kept):
    assert redact({"VLLM_ARGS": value}) == {"VLLM_ARGS": kept}


@given(prefix=st.sampled_from(["ghp_", "gho_", "ghs_", "github_pat_", "hf_"]), token=tokens)
def test_a_token_is_redacted_wherever_it_sits_in_a_value(prefix, token):
    (value,) = redact({"VLLM_X": f"--flag={prefix}{token} --other"}).values()
    assert token not in value and value.endswith(" --other")


versions = st.from_regex(r"\A[0-9]{1,2}\.[0-9]{1,3}\.[0-9]{1,3}(\.post[0-9]|rc[0-9]|\+cu12[0-9])?\Z")
commits = st.text("0123456789abcdef", min_size=7, max_size=64)
words = st.text(string.ascii_lowercase + "_-", min_size=1, max_size=40)


@given(value=st.one_of(versions, commits, words, st.builds("/usr/lib/{}/{}".format, words, versions)))
def test_versions_commits_and_plain_paths_are_kept(value):
    assert redact({"VLLM_X": value}) == {"VLLM_X": value}


# A user's machine as it knows itself: their home and login, its WSL distribution, its network name.
ALICE = names_of(
    {"HOME": "/home/alice", "USER": "alice", "WSL_DISTRO_NAME": "Ubuntu-22.04"}, ["alice-desktop.corp.example.com"]
)
SLACK = "https://hooks.slack.com/services/T0123ABCD/B0456EFGH"
# Replaced by their shape, wherever they are: at intake, where the sender's machine is unknown, too.
BY_SHAPE = [
    ("mail alice@example.com.", "mail <email>."),
    ("from 10.1.2.3 and 192.168.0.7:8000, [fe80::1%eth0]:80", "from <ip> and <ip>:8000, [<ip>]:80"),
    ("172.16.9.1 100.64.0.1 169.254.1.2/16 fd12:3456:789a::1", "<ip> <ip> <ip>/16 <ip>"),
    (f"{SLACK}/Xq7ZpL2mRt9WcV4kNb8HsJ3f", f"{SLACK}/{REDACTED}"),
    ("https://api.telegram.org/bot123456789:AAHdqTcvCH1vGWJxfSeofSAs0K5PALDsaw/sendMessage",
     f"https://api.telegram.org/{REDACTED}/sendMessage"),
    ("/mnt/c/Users/Alice/x", "~/x"),
    (r"\\wsl$\Ubuntu-22.04\home\alice\m", r"~\m"),
    (r"\\wsl.localhost\Debian\opt\m", r"\\wsl.localhost\<distro>\opt\m"),
    ("token glpat-Ab3dE6gH9jK2mN5pQ8rS", f"token {REDACTED}"),
    ("glrt-Ab3dE6gH9jK2mN5pQ8rS GR1348941Ab3dE6gH9jK2mN5pQ8rS", f"{REDACTED} {REDACTED}"),
    ("BUILDKITE_API_TOKEN=bkua_" + "0123456789abcdef" * 2 + "01234567", f"BUILDKITE_API_TOKEN={REDACTED}"),
    ("bkua_" + "0123456789abcdef" * 2 + "01234567", REDACTED),
]  # fmt: skip


@pytest.mark.parametrize(("said", "kept"), BY_SHAPE)
def test_an_address_a_token_or_a_windows_home_is_replaced_by_its_shape_alone(said, kept):
    assert scrub(said) == kept


@pytest.mark.parametrize(
    ("said", "kept"),
    [
        *BY_SHAPE,
        ("alice-desktop.corp.example.com:8000 refused", "<host>:8000 refused"),
        ("ALICE-DESKTOP timed out, and alice-desktop.lan too", "<host> timed out, and <host> too"),
        ("on Ubuntu-22.04.", "on <distro>."),
        ("/data/alice/models and Alice's cache", "/data/<user>/models and <user>'s cache"),
        ("alice-desktop alice Ubuntu-22.04 /home/alice/x", "<host> <user> <distro> ~/x"),
    ],
)
def test_what_names_the_user_or_their_machine_is_replaced_by_what_it_was(said, kept):
    assert scrub(said, ALICE) == kept


# A user named "ai" on a machine named "ai": two letters, which only a whole part of a path is taken for.
AI = names_of({"HOME": "/home/ai", "USER": "ai"}, ["ai"])


@pytest.mark.parametrize(
    "value",
    [
        "726934d87048d92e76da8934d9ae3534640bae3d",
        "6.6.87.2-microsoft-standard-WSL2",
        "Windows version: 10.0.26100.4652, WSL 2.5.9.0",
        "meta-llama/Llama-3.1-8B",
        "cuda-wsl2new-v2-graph",
        "http://127.0.0.1:8000/v1/models on localhost",
        "main, cuda and the domain said: an ai model",
        "GPU-5f1c9b7e-3a2d-4c1e-9f0a-1b2c3d4e5f60 sha256:fd12abcd0123",
        "https://huggingface.co/meta-llama/Meta-Llama-3-70B-Instruct/resolve/main/config.json",
        "https://wheels.vllm.ai/726934d87048d92e76da8934d9ae3534640bae3d/vllm-0.11.0-cp38-abi3-manylinux1_x86_64.whl",
        "tests/cell/test_repro.py:151 /usr/lib/wsl/lib/nvidia-smi",
    ],
)
def test_versions_commits_models_and_a_short_name_inside_words_are_kept(value):
    assert scrub(value, AI) == value
    assert scrub("/data/ai/models", AI) == "/data/<user>/models"
