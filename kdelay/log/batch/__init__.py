"""The batch format: the bytes of a batch and of a .log's framing."""

try:  # C extensions, compiled from the .pyx files beside this one when kdelay is installed
    from . import header_walk, record_loops  # noqa: F401
except ImportError as e:
    raise ImportError("kdelay's compiled kernels (kdelay/log/batch/*.pyx) are not built: "
                      "install the package (pip install -e .), which compiles them") from e
