#!/bin/sh
# Install the operator distribution into a fresh virtualenv and check it: the operator
# image's Dockerfile and tests/operator/test_operator_distribution.py run exactly this.
#   sh operator/install.sh VENV_DIR
set -eu
venv=${1:?usage: install.sh VENV_DIR}
here=$(cd "$(dirname "$0")" && pwd)
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --disable-pip-version-check -q "$here"
"$venv/bin/kubellm-operator" --version
# It only talks to the Kubernetes API: neither torch nor the runtime may come along.
"$venv/bin/python" - <<'PY'
import importlib.util, pathlib, sysconfig
import kubellm.operator.cli  # noqa: F401  (imports cleanly)
for name in ("torch", "transformers", "kubellm.runtime", "kubellm.kernels"):
    assert importlib.util.find_spec(name) is None, f"{name} came along with the operator"
site = pathlib.Path(sysconfig.get_paths()["purelib"])
size = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
print(f"site-packages: {size / 2**20:.1f} MiB")
PY
