"""Type stubs of arraybridge's native module (Rust, PyO3 abi3). The public API is re-exported
and documented by ``arraybridge`` itself."""

from typing import Any, Callable, Dict, List, Optional, Tuple, Union

import numpy as np
import numpy.typing as npt

BUILD_PROFILE: str
"""``"release"`` or ``"dev"``: how the extension was compiled (``ab.build_info()``)."""

class ArrayBridgeError(Exception):
    """Base class of every arraybridge error; the message is the Rust error's."""

class OutOfMemory(ArrayBridgeError):
    """Out of memory: a device ran out, after arraybridge's retries, or a host allocation sized
    by an input's shape would not fit the host memory budget (checked before allocating; the
    message names what was asked and what fits)."""

class BackendUnavailable(ArrayBridgeError):
    """The device named is not there (backend not compiled in, library missing, ordinal out of
    range)."""

class InvalidInput(ArrayBridgeError):
    """An argument or array arraybridge cannot use (shape, dtype, device string, read-only
    destination, a stream for host memory, ...)."""

    frames: range | None
    """The frames of a movie the error concerns (``range(4, 6)``), ``None`` otherwise."""

class SubnetOversizeException(InvalidInput):
    """``link(..., drop=True)`` met a subnet too large to drop (trackpy's
    ``SubnetOversizeException``)."""

class Array:
    """An array held by arraybridge, on the host or a device; any DLPack consumer takes it."""

    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def ndim(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def data_ptr(self) -> int: ...
    def __dlpack__(
        self,
        *,
        stream: Optional[Any] = None,
        max_version: Optional[Tuple[int, int]] = None,
        dl_device: Optional[Tuple[int, int]] = None,
        copy: Optional[bool] = None,
    ) -> Any: ...
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def numpy(self) -> np.ndarray: ...
    def __len__(self) -> int: ...

def convert(x: Any, device: str = "cpu", *, copy: Optional[bool] = None) -> Array: ...
def convert_api(
    x: Any, device: Optional[str] = "cpu", *, to: str = "array", copy: Optional[bool] = None
) -> Any:
    """``arraybridge.convert`` (named ``convert``): the core for ``to="array"`` and a device
    string, ``arraybridge._convert_py`` for the rest."""
def copyto(dst: Any, src: Any) -> None: ...
def route(x: Any, device: str) -> str: ...
def devices() -> List[Dict[str, Any]]: ...
def set_memory_limit(mb: Optional[int]) -> None:
    """Cap the host memory arraybridge may allocate at ``mb`` MiB (a whole number >= 1; sets
    ``ARRAYBRIDGE_MEMORY_LIMIT_MB`` in ``os.environ``), or remove the cap with ``None`` (the
    machine's limits alone: available memory, cgroup, ``ulimit -v``). Anything else raises
    ``InvalidInput``."""

def memory_stats(device: str) -> Dict[str, Any]:
    """The device's memory and its pool's figures (see ``arraybridge.memory_stats``)."""
    ...

def free_pools(device: str) -> int:
    """Release the cached blocks of the device's pools; the bytes released."""
    ...

def set_device_memory_limit(device: str, limit: Union[float, int, None]) -> None:
    """Cap the device's pool: a fraction in (0, 1], bytes, or None."""
    ...

def gpus() -> List[str]:
    """The GPUs ``device=\"all\"`` runs on, as device names."""
    ...

def memory_limit() -> Optional[int]:
    """The explicit host memory limit in MiB, ``None`` when there is none (the default budget
    rule of ``bridge_core::host`` applies); ``InvalidInput`` for an invalid
    ``ARRAYBRIDGE_MEMORY_LIMIT_MB``."""

def backends() -> Dict[str, Optional[str]]: ...
def blob_log(
    image: Any,
    *,
    min_sigma: float,
    max_sigma: float,
    num_sigma: int,
    threshold: Optional[float],
    threshold_rel: Optional[float],
    overlap: float,
    log_scale: bool,
    exclude_border: Tuple[int, int],
    prescale: str,
    device: str,
    batch_size: int,
) -> Tuple[npt.NDArray[np.float64], bool]: ...
def locate(
    image: Any,
    *,
    diameter: int,
    minmass: float,
    maxsize: Optional[float],
    separation: Optional[float],
    noise_size: float,
    smoothing_size: Optional[int],
    threshold: Optional[float],
    invert: bool,
    percentile: float,
    topn: Optional[int],
    preprocess: bool,
    characterize: bool,
    device: str,
    batch_size: int,
    max_iterations: int = 10,
) -> Tuple[Dict[str, np.ndarray], bool, List[Tuple[int, Optional[str]]]]: ...
def link(
    frames: npt.NDArray[np.int64],
    pos: npt.NDArray[np.float64],
    *,
    search_range: float,
    memory: int,
    max_subnet: Optional[int] = ...,
    adaptive: Optional[Tuple[float, float]] = ...,
    drop: bool = ...,
) -> npt.NDArray[np.int64]: ...
def paco(
    cube: Any,
    angles: Any,
    psf: Any,
    *,
    radius: int,
    mode: str,
    fwhm: Optional[float],
    psf_norm_factor: Optional[float],
    subpixel: str,
    edge: str,
    nearest: bool,
    center: Optional[Tuple[float, float]],
    stats_strategy: str,
    top: int,
    device: str,
    progress: Optional[Callable[[int, int], None]] = None,
) -> Dict[str, Any]: ...
def unbiased_flux(
    cube: Any,
    angles: Any,
    psf: Any,
    positions: List[Tuple[float, float]],
    *,
    radius: int,
    mode: str,
    fwhm: Optional[float],
    psf_norm_factor: Optional[float],
    subpixel: str,
    edge: str,
    nearest: bool,
    center: Optional[Tuple[float, float]],
    eps: float,
    max_iter: int,
    alpha0: float,
    progress: Optional[Callable[[int, int], None]] = None,
) -> npt.NDArray[np.float64]: ...
def offload_decision(
    input_bytes: int, output_bytes: int, flops: float, profiles: Optional[dict] = None
) -> dict: ...
def record_decision(device: str, reason: str) -> None: ...
