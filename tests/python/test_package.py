"""The package as pip installs it: the library, the command and (where nvcc
built it) the CUDA plugin inside the package's folder; import and the
command work from any folder without COHORT_LIB."""
import os
import shutil
import subprocess
import sys

from conftest import SRC, cohort_cmd


def test_library_inside_the_package(cohort):
    here = os.path.dirname(os.path.abspath(cohort.__file__))
    assert not here.startswith(os.path.join(SRC, "python")), \
        f"the tests import the source tree's package ({here}), not the installed one"
    assert "COHORT_LIB" not in os.environ
    assert cohort._find_library() == os.path.join(here, "libcohort.so")
    assert os.access(os.path.join(here, "cohort"), os.X_OK)
    nvcc = shutil.which("nvcc") or os.path.exists("/usr/local/cuda/bin/nvcc")
    assert os.path.exists(os.path.join(here, "libcohort_cuda.so")) == bool(nvcc)
    assert cohort.devices()[0]["name"] == "cpu:0"
    if nvcc:  # the library finds the plugin beside itself (the program is python here)
        import ctypes  # noqa: PLC0415
        lib, d, err = cohort._lib(), ctypes.c_void_p(), cohort._Error()
        assert lib.cohort_devices_discover(ctypes.byref(d), ctypes.byref(err)) == 0
        note = (lib.cohort_devices_note(d) or b"").decode()
        lib.cohort_devices_free(d)
        assert "no CUDA plugin" not in note, note


def test_import_and_command_from_another_folder(cohort, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COHORT_LIB"}
    r = subprocess.run([sys.executable, "-c", "import cohort; print(cohort.__file__)"],
                       cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == cohort.__file__, r.stderr
    r = subprocess.run([cohort_cmd(), "--version"], cwd=tmp_path, env=env, capture_output=True,
                       text=True)
    from importlib.metadata import version  # noqa: PLC0415
    assert r.returncode == 0 and r.stdout.strip() == f"cohort {version('cohort')}", r.stdout
    r = subprocess.run([cohort_cmd(), "bogus"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert r.returncode == 2 and "unknown command 'bogus'" in r.stderr
