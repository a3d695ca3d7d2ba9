# Source me: the environment Spark needs to use the project's virtual environment.
_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PYSPARK_PYTHON="$_root/.venv/bin/python"
export PYSPARK_DRIVER_PYTHON="$_root/.venv/bin/python"
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"
unset _root
