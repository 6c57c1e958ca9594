"""GPU target logic: parsing target names and ids, and which code runs where.

The data it reads (known processors, families, compute capabilities) is :mod:`kernelpack.targets.processors`.
The compatibility rules are those of the vendors' runtimes, so that the image kernelpack picks is one
the runtime accepts: for AMD the HIP runtime's (ROCm clr ``isCodeObjectCompatibleWithDevice`` and
``GenericTargetMapping``; ROCR's ``Isa::IsCompatible`` agrees), for NVIDIA the CUDA driver's (binary
compatibility within a major version, PTX compiled for newer GPUs). The loader calls
:func:`select_image`; everything here is pure and does no I/O.
"""

# No `from __future__ import annotations`: every load imports this module, and typing compiles
# each string annotation of a NamedTuple field into a ForwardRef (docs/loader.md, "Ready time").

import re
from collections.abc import Mapping, Sequence
from typing import Literal, NamedTuple, TypeVar

from ..errors import UsageError
from .processors import (
    AMD_BY_NAME,
    AMD_FAMILIES,
    AMD_PROCESSORS,
    FEATURES,
    GENERIC_CODE_OBJECT_VERSION,
    GENERIC_MIN_ROCM,
    NVIDIA_ARCHS,
    NVIDIA_BY_NAME,
    AmdProcessor,
)


class TargetId(NamedTuple):
    """An AMD target id: a processor and the features it fixes.

    ``features`` maps a feature name to True (+) or False (-); a feature absent from the map is
    "any", which is what a code object compiled without naming it supports.
    """

    processor: str
    features: tuple[tuple[str, bool], ...] = ()

    @classmethod
    def parse(cls, text: str) -> "TargetId":
        """Parse ``gfx90a:xnack+:sramecc-`` (features in any order) into canonical form."""
        processor, *parts = text.strip().split(":")
        info = AMD_BY_NAME.get(processor)
        if info is None:
            raise UsageError(f"{processor}: unknown AMD target{suggest(processor, AMD_BY_NAME)}")
        features: dict[str, bool] = {}
        for part in parts:
            name, sign = part[:-1], part[-1:]
            if name not in FEATURES or sign not in "+-" or not sign:
                raise UsageError(
                    f"{text}: bad feature {part!r}; expected sramecc+, sramecc-, xnack+ or xnack-"
                )
            if not getattr(info, name):
                raise UsageError(f"{text}: {processor} has no {name} feature")
            if name in features:
                raise UsageError(f"{text}: feature {name} given twice")
            features[name] = sign == "+"
        return cls(processor, tuple(sorted(features.items())))

    @property
    def info(self) -> AmdProcessor:
        return AMD_BY_NAME[self.processor]

    def feature(self, name: str) -> bool | None:
        """True, False, or None for "any"."""
        return dict(self.features).get(name)

    def __str__(self) -> str:
        return self.processor + "".join(
            f":{name}{'+' if on else '-'}" for name, on in self.features
        )


# The longest name a suggestion is looked for: longer than any target id ("gfx908:sramecc+:xnack-")
_LONGEST_SUGGESTED = 64


def suggest(name: str, known: Mapping[str, object] | tuple[str, ...]) -> str:
    """'; did you mean X?' for the nearest known name, or '' when nothing is close.

    Nearest by edit distance; ties go to the longer common prefix (the same generation), then to
    the name listed first (the common one): a mistyped gfx1110 is one edit from gfx1010, gfx1100
    and gfx1150, and gfx1100 is the likeliest.
    """
    if len(name) > _LONGEST_SUGGESTED:  # no target is near it, and the search is quadratic
        return ""
    scored = [
        (_edit_distance(name.lower(), k.lower()), -_common_prefix(name, k), i, k)
        for i, k in enumerate(known)
    ]
    if not scored:
        return ""
    distance, _, _, best = min(scored)
    return f"; did you mean {best}?" if distance <= max(2, len(name) // 3) else ""


def _common_prefix(a: str, b: str) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _edit_distance(a: str, b: str) -> int:
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


# --- AMD processor names and the KFD's gfx_target_version ------------------------------------------

# compiled on first use (re keeps it): an NVIDIA load parses no AMD name
_GFX_NAME = r"gfx(\d+)([0-9a-f])([0-9a-f])"


def gfx_target_version(processor: str) -> int:
    """The KFD ``gfx_target_version`` of a processor: decimal MMmmss (gfx90a -> 90010).

    The name carries the version (major in decimal, minor and stepping one hex digit each), which
    is how LLVM, libhsakmt and ROCR all spell it; generic targets have none and raise ValueError.
    """
    match = re.fullmatch(_GFX_NAME, processor)
    if match is None:
        raise ValueError(f"{processor}: not a gfx processor name with a version")
    major, minor, step = int(match[1]), int(match[2], 16), int(match[3], 16)
    return major * 10000 + minor * 100 + step


def split_gfx_target_version(version: int) -> tuple[int, int, int]:
    """(major, minor, stepping) of a KFD ``gfx_target_version`` (libhsakmt's HSA_GET_GFX_VERSION_*)."""
    return version // 10000 % 100, version // 100 % 100, version % 100


def processor_name(major: int, minor: int, step: int) -> str:
    """The processor an HSA version names: ``gfx{major}{minor:x}{step:x}`` (9, 0, 10 -> gfx90a).

    Minor and stepping above 15 have no one-digit spelling; no GPU has them, so they raise.
    """
    if not (0 <= minor < 16 and 0 <= step < 16) or major <= 0:
        raise ValueError(f"version {major}.{minor}.{step} names no gfx processor")
    return f"gfx{major}{minor:x}{step:x}"


def agent_target(processor: str, *, sramecc: bool, xnack: bool) -> TargetId:
    """The target id of a GPU running in the given modes, as ROCR reports its ISA.

    A GPU has every feature its processor supports fixed to on or off; features the processor lacks
    do not appear. A processor missing from the table gets no features (nothing is known of it),
    so only code objects built for exactly that name, without features, can fit it.
    """
    info = AMD_BY_NAME.get(processor)
    if info is None:
        return TargetId(processor)
    modes = {"sramecc": sramecc, "xnack": xnack}
    return TargetId(
        processor, tuple((name, modes[name]) for name in FEATURES if getattr(info, name))
    )


# --- AMD compatibility (the HIP runtime's rule) -----------------------------------------------------


def _sign(value: bool) -> str:
    return "+" if value else "-"


def amd_mismatch(code: TargetId, agent: TargetId) -> str | None:
    """Why a code object built for ``code`` cannot run on ``agent``; None when it can.

    As the HIP runtime decides: the processors are equal, or the code object is generic and its
    processor is the agent's generic family; and every feature the code object fixes (+ or -)
    equals the agent's. A feature the code object leaves out matches anything; one the agent
    leaves out (a target forced without features) matches only a code object that leaves it out.
    """
    if code.processor != agent.processor:
        code_info = AMD_BY_NAME.get(code.processor)
        if code_info is None or not code_info.is_generic:
            return f"built for {code.processor}, the GPU is {agent.processor}"
        agent_info = AMD_BY_NAME.get(agent.processor)
        family = agent_info.generic if agent_info is not None else None
        if family != code.processor:
            covered = (
                f"whose generic target is {family}" if family else "which has no generic target"
            )
            return f"{code.processor} does not cover {agent.processor}, {covered}"
    for name, wanted in code.features:
        have = agent.feature(name)
        if have is None:
            return f"built for {name}{_sign(wanted)}, the GPU's target {agent} leaves {name} open"
        if have != wanted:
            return f"built for {name}{_sign(wanted)}, the GPU runs {name}{_sign(have)}"
    return None


def amd_compatible(code: TargetId, agent: TargetId) -> bool:
    """True when a code object for ``code`` loads on ``agent`` (see :func:`amd_mismatch`)."""
    return amd_mismatch(code, agent) is None


def amd_rank(code: TargetId, agent: TargetId) -> tuple[int, int]:
    """Sort key among code objects that fit ``agent``, best first.

    Code for the exact processor before generic code (the HIP runtime keeps a specific match over a
    generic one), then the fewest features left to "any": a code object compiled for the agent's
    xnack/sramecc mode is the one tuned for it.
    """
    left_any = sum(1 for name, _ in agent.features if code.feature(name) is None)
    return (int(code.processor != agent.processor), left_any)


def _amd_fit_description(code: TargetId, agent: TargetId) -> str:
    if code.processor != agent.processor:
        rocm = ".".join(map(str, GENERIC_MIN_ROCM))
        return (
            f"generic code for {agent.processor} ({code.processor}: "
            f"code object v{GENERIC_CODE_OBJECT_VERSION}, ROCm {rocm} or later)"
        )
    left_any = [name for name, _ in agent.features if code.feature(name) is None]
    if left_any:
        return f"built for {agent.processor}, {' and '.join(left_any)} any"
    return f"built for {agent}" if agent.features else f"built for {agent.processor}"


# --- NVIDIA targets -------------------------------------------------------------------------------

# ASCII digits, at most four for the major (a longer name is no target; int() of one of 5,000
# digits is a ValueError past Python's limit)
_NVIDIA_NAME = re.compile(r"(sm|compute)_([0-9]{1,4})([0-9])(a?)")


class NvidiaTarget(NamedTuple):
    """An NVIDIA GPU or code target: ``sm_XY`` (a GPU, or a cubin), ``sm_XYa`` (a cubin using
    arch-specific instructions, for that exact GPU only), ``compute_XY`` / ``compute_XYa`` (PTX).

    The last digit is the minor version, the digits before it the major: sm_90 is 9.0, sm_120 12.0.
    Names are not checked against NVIDIA_ARCHS, so that GPUs newer than the table still parse.
    """

    major: int
    minor: int
    ptx: bool = False
    arch_specific: bool = False

    @classmethod
    def parse(cls, text: str) -> "NvidiaTarget":
        match = _NVIDIA_NAME.fullmatch(text.strip())
        if match is None:
            raise UsageError(
                f"{text}: not an NVIDIA target; expected sm_XY, sm_XYa, compute_XY or compute_XYa"
                f"{suggest(text, NVIDIA_BY_NAME)}"
            )
        return cls(int(match[2]), int(match[3]), match[1] == "compute", match[4] == "a")

    @property
    def capability(self) -> str:
        return f"{self.major}.{self.minor}"

    def __str__(self) -> str:
        kind = "compute" if self.ptx else "sm"
        return f"{kind}_{self.major}{self.minor}{'a' if self.arch_specific else ''}"


def nvidia_mismatch(code: NvidiaTarget, gpu: NvidiaTarget) -> str | None:
    """Why code for ``code`` cannot run on a GPU of compute capability ``gpu``; None when it can.

    As the CUDA driver decides: an arch-specific target (cubin or PTX) runs on its own GPU only; a
    cubin for X.y runs on X.z with z >= y; PTX for X.y is compiled by the driver for any GPU of
    compute capability X.y or higher.
    """
    if code.arch_specific:
        if (code.major, code.minor) != (gpu.major, gpu.minor):
            return f"{code} runs only on {code.capability} GPUs, the GPU is {gpu.capability}"
    elif code.ptx:
        if (code.major, code.minor) > (gpu.major, gpu.minor):
            return f"PTX {code} needs compute capability {code.capability} or newer, the GPU is {gpu.capability}"
    elif code.major != gpu.major or code.minor > gpu.minor:
        return (
            f"a cubin for {code} runs on {code.major}.{code.minor} to {code.major}.9 GPUs, "
            f"the GPU is {gpu.capability}"
        )
    return None


def nvidia_compatible(code: NvidiaTarget, gpu: NvidiaTarget) -> bool:
    """True when code for ``code`` runs on ``gpu`` (see :func:`nvidia_mismatch`)."""
    return nvidia_mismatch(code, gpu) is None


def nvidia_rank(code: NvidiaTarget, gpu: NvidiaTarget) -> tuple[int, int, int, int]:
    """Sort key among targets that fit ``gpu``, best first.

    Cubins before PTX (PTX costs a driver compile at first load, a cubin none: docs/loader.md
    measures both); arch-specific code (built for exactly this GPU, with its
    extra instructions) before portable code; then the newest version, the closest to the GPU.
    """
    return (int(code.ptx), int(not code.arch_specific), -code.major, -code.minor)


def _nvidia_fit_description(code: NvidiaTarget, gpu: NvidiaTarget) -> str:
    if code.ptx:
        return f"PTX for {code.capability}, compiled by the driver at first load"
    if (code.major, code.minor) == (gpu.major, gpu.minor):
        return f"cubin built for this GPU{' (arch-specific)' if code.arch_specific else ''}"
    return f"cubin for {code.capability}, binary compatible with {gpu.capability}"


# --- One parser for every target name ---------------------------------------------------------------

TargetKind = Literal["specific", "generic", "family", "sm", "compute"]
# The image kinds' names, as kernelpack.loader.images.KindName (not imported from there: the variant
# provider copies targets and all it imports, and images reaches the file readers).
ImageKind = Literal["code_object", "cubin", "ptx"]


def written_kind(name: str) -> Literal["amd", "sm", "compute"]:
    """How a target name is written, before it is checked against any table: NVIDIA's names start
    with sm or compute (sm_90, compute_80), every other name is AMD's. The one place that tells the
    vendors apart by spelling (the parser and the matrix both ask it)."""
    if name.startswith("compute"):
        return "compute"
    return "sm" if name.startswith("sm") else "amd"


class ParsedTarget(NamedTuple):
    """What a target name is: the one classification the builder, the loader and the CLI use.

    ``kind``: "specific" (an AMD processor, gfx942), "generic" (an AMD generic target,
    gfx11-generic), "family" (a group of AMD processors a matrix may name, gfx110X), "sm" (an
    NVIDIA GPU or cubin, sm_90, sm_90a) or "compute" (NVIDIA PTX, compute_80). ``text`` is the
    canonical spelling; ``features`` the AMD features it fixes (sramecc/xnack, True for +);
    ``arch_specific`` the NVIDIA 'a' suffix; ``members`` a family's processors.
    """

    text: str
    vendor: Literal["amd", "nvidia"]
    kind: TargetKind
    features: tuple[tuple[str, bool], ...] = ()
    arch_specific: bool = False
    members: tuple[str, ...] = ()

    @property
    def image_kind(self) -> ImageKind:
        """The kind of image built for it: AMD code objects, NVIDIA cubins or PTX."""
        if self.vendor == "amd":
            return "code_object"
        return "ptx" if self.kind == "compute" else "cubin"

    @property
    def amd(self) -> TargetId:
        """The AMD target id (UsageError for a family or an NVIDIA name)."""
        if self.vendor != "amd" or self.kind == "family":
            raise UsageError(f"{self.text}: not one AMD target id")
        return TargetId.parse(self.text)

    @property
    def nvidia(self) -> NvidiaTarget:
        """The NVIDIA target (UsageError for an AMD name)."""
        if self.vendor != "nvidia":
            raise UsageError(f"{self.text}: not an NVIDIA target")
        return NvidiaTarget.parse(self.text)


def parse_target(text: str) -> ParsedTarget:
    """Classify and canonicalise any target name kernelpack accepts; UsageError if unknown.

    AMD names are checked against the processor table (features included, gfx90a:xnack+) or
    AMD_FAMILIES; NVIDIA names by their form (sm_XY[a], compute_XY[a]), so that GPUs newer than
    the table still parse. The error names the nearest known name.
    """
    name = text.strip()
    if name in AMD_FAMILIES:
        return ParsedTarget(name, "amd", "family", members=AMD_FAMILIES[name])
    if written_kind(name) != "amd":
        nvidia = NvidiaTarget.parse(name)
        kind: TargetKind = "compute" if nvidia.ptx else "sm"
        return ParsedTarget(str(nvidia), "nvidia", kind, arch_specific=nvidia.arch_specific)
    processor = name.split(":")[0]
    if processor not in AMD_BY_NAME:
        known = [*AMD_BY_NAME, *AMD_FAMILIES]
        raise UsageError(f"{name}: unknown AMD target{suggest(processor, tuple(known))}")
    amd = TargetId.parse(name)
    kind = "generic" if amd.info.is_generic else "specific"
    return ParsedTarget(str(amd), "amd", kind, features=amd.features)


# --- Image selection (the loader's entry point) ----------------------------------------------------

GpuTarget = TargetId | NvidiaTarget
ImageT = TypeVar("ImageT", bound=Mapping[str, object])


def _image_fit(
    image: Mapping[str, object], gpu: GpuTarget, code_object_v6: bool | None
) -> tuple[tuple[int, ...], str] | str:
    """(rank key, why it fits) for an image that runs on ``gpu``, or the reason it does not."""
    vendor, target, kind = image.get("vendor"), str(image.get("target")), image.get("kind")
    gpu_vendor = "amd" if isinstance(gpu, TargetId) else "nvidia"
    if vendor != gpu_vendor:
        return f"built for {vendor} GPUs, this GPU is {gpu_vendor}"
    try:
        expected = parse_target(target).image_kind
        if kind != expected:
            return f"kind {kind!r} does not match target {target} (its images are {expected})"
        if isinstance(gpu, TargetId):
            code = TargetId.parse(target)
            why_not = amd_mismatch(code, gpu)
            if why_not is not None:
                return why_not
            if code.info.is_generic and code_object_v6 is False:
                return (
                    f"generic code is code object v{GENERIC_CODE_OBJECT_VERSION}, which this HIP "
                    f"runtime cannot load (ROCm {'.'.join(map(str, GENERIC_MIN_ROCM))} or later can)"
                )
            return amd_rank(code, gpu), _amd_fit_description(code, gpu)
        nvidia_code = NvidiaTarget.parse(target)
    except UsageError as error:
        return f"target unknown to this kernelpack ({error}); a newer kernelpack may know it"
    why_not = nvidia_mismatch(nvidia_code, gpu)
    if why_not is not None:
        return why_not
    return nvidia_rank(nvidia_code, gpu), _nvidia_fit_description(nvidia_code, gpu)


def runs_code_object_v6(hip_version: str) -> bool | None:
    """Whether a HIP runtime of this version ("6.4.43484", as hipRuntimeGetVersion spells it)
    loads code object v6, which generic targets need; None when the version does not parse."""
    match = re.match(r"(\d+)\.(\d+)", hip_version.strip())
    if match is None:
        return None
    return (int(match[1]), int(match[2])) >= GENERIC_MIN_ROCM


def select_image(
    images: Sequence[ImageT], gpu: GpuTarget, *, runtime_code_object_v6: bool | None = None
) -> tuple[ImageT | None, list[str]]:
    """The image of a module to load on a GPU of target ``gpu``, and why, candidate by candidate.

    ``images`` are the module's index entries (kernelpack.formats.index.Image: "vendor", "target", "kind"
    are read); ``gpu`` is kernelpack.devices.detect.Gpu.target. Among the images that fit (same vendor,
    compatible by the runtime's rules), the best by :func:`amd_rank` / :func:`nvidia_rank` wins;
    ties go to the earlier image: an image for the GPU's own processor before its generic
    target's. ``runtime_code_object_v6`` is what the installed HIP runtime can load
    (:func:`runs_code_object_v6`): False rejects generic images, which are code object v6; None
    (not known, e.g. a recorded topology) lets them fit and their reason says what they need. The reasons are one line per image, in the order given, saying
    "selected", "fits" or "rejected" and why: what KERNELPACK_DEBUG=1 and ``kernelpack info``
    print, and what a NoImageError should quote. An empty ``images`` gives (None, []).
    """
    fits: list[tuple[tuple[int, ...], int, str]] = []
    verdicts: list[str] = []
    for position, image in enumerate(images):
        outcome = _image_fit(image, gpu, runtime_code_object_v6)
        if isinstance(outcome, str):
            verdicts.append(f"rejected: {outcome}")
        else:
            key, why = outcome
            fits.append((key, position, why))
            verdicts.append("")
    best = min(fits) if fits else None
    for _, position, why in fits:
        chosen = best is not None and position == best[1]
        verdicts[position] = f"selected: {why}" if chosen else f"fits ({why}), ranked lower"
    labels = [f"{image.get('target')} {image.get('kind')}" for image in images]
    reasons = [
        f"{label} for {gpu}: {verdict}" for label, verdict in zip(labels, verdicts, strict=True)
    ]
    return (images[best[1]] if best is not None else None), reasons


def known_code_targets() -> list[str]:
    """Every code target name the tables know (AMD processors and generic targets, NVIDIA cubin
    and PTX targets), the universe an installer's variant provider chooses from."""
    nvidia = [a.name for a in NVIDIA_ARCHS]
    return (
        [p.name for p in AMD_PROCESSORS] + nvidia + [n.replace("sm_", "compute_") for n in nvidia]
    )


def supported_targets(gpu: GpuTarget, *, runtime_code_object_v6: bool | None = None) -> list[str]:
    """The known code targets whose images run on ``gpu``, best first by :func:`select_image`'s
    rule: what kernelpack's variant provider reports, so that an installer picks the wheel the
    loader would pick."""
    ranked = []
    for position, name in enumerate(known_code_targets()):
        parsed = parse_target(name)
        image = {"vendor": parsed.vendor, "target": name, "kind": parsed.image_kind}
        outcome = _image_fit(image, gpu, runtime_code_object_v6)
        if not isinstance(outcome, str):
            ranked.append((outcome[0], position, name))
    return [name for _, _, name in sorted(ranked)]


def buildable_targets() -> list[str]:
    """Every code target name the builder accepts in ``--targets`` and arch_matrix.toml
    (buildsys.matrix): the AMD processors and generic targets of the table, its NVIDIA cubin
    targets, and PTX for its portable ones (arch-specific PTX, compute_90a, is not built)."""
    return [
        name
        for name in known_code_targets()
        if not (name.startswith("compute_") and parse_target(name).arch_specific)
    ]


def build_targets_for(gpu: GpuTarget) -> list[str]:
    """The targets the builder accepts whose images run on ``gpu``, best first as the loader
    ranks them, portable code before arch-specific (what advice tells a user to build): the GPU's
    own processor or sm_XY where the table has it, for a GPU newer than the table an older cubin
    of its major or PTX. Empty where no target the builder accepts runs on it (gfx803, sm_70)."""
    buildable = set(buildable_targets())
    fitting = [name for name in supported_targets(gpu) if name in buildable]
    return sorted(fitting, key=lambda name: parse_target(name).arch_specific)
