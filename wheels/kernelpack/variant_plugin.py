"""kernelpack's wheel-variant provider plugin (PEP 825 installers call it through variantlib).

Namespace ``kernelpack``; features ``amd_target`` and ``nvidia_target``, whose values are code
target names as variant property values spell them (``gfx1151``, ``gfx11_generic``, ``sm_90``,
``compute_80``). For the GPUs of this machine, found as kernelpack's loader finds them
(:mod:`kernelpack.devices.detect`: KFD topology, HSA_OVERRIDE_GFX_VERSION, the visible-devices variables,
NVML or libcuda, KERNELPACK_TARGET), it reports every target whose code runs there, best first by the
loader's own rule (:func:`kernelpack.targets.supported_targets`), so that an installer picks the
variant wheel whose images the loader would load.

The provider wheel (``kernelpack-variant-provider``) carries this module with copies of the
modules it imports (devices/detect.py, targets/, errors.py, ...: buildsys.variants.provider_modules), and nothing else: an installer runs it before kernelpack is
installed. Why kernelpack has its own provider rather than the vendors': docs/wheels.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .devices.detect import detect_gpus
from .targets import known_code_targets, parse_target, supported_targets

NAMESPACE = "kernelpack"
FEATURES = {"amd": "amd_target", "nvidia": "nvidia_target"}


def property_value(target: str) -> str:
    """A target name as a variant property value ([a-z0-9_.]+): gfx11-generic -> gfx11_generic."""
    return parse_target(target).text.split(":")[0].replace("-", "_").lower()


@dataclass(frozen=True)
class FeatureConfig:
    """One feature and its values, best first (variantlib's VariantFeatureConfigType)."""

    name: str
    values: list[str] = field(default_factory=list)
    multi_value: bool = False


class KernelpackVariantPlugin:
    """The plugin object variantlib loads (``plugin-api``)."""

    namespace = NAMESPACE
    is_build_plugin = False
    all_properties_compatible = False

    @classmethod
    def get_all_configs(cls) -> list[FeatureConfig]:
        """Every value each feature can take."""
        values: dict[str, list[str]] = {feature: [] for feature in FEATURES.values()}
        for target in known_code_targets():
            feature = FEATURES[parse_target(target).vendor]
            if property_value(target) not in values[feature]:
                values[feature].append(property_value(target))
        return [FeatureConfig(name, vals) for name, vals in values.items()]

    @classmethod
    def get_supported_configs(cls) -> list[FeatureConfig]:
        """The values the GPUs of this machine run, best first; GPUs in the loader's order."""
        values: dict[str, list[str]] = {}
        for gpu in detect_gpus():
            feature = FEATURES[gpu.vendor]
            for target in supported_targets(gpu.target):
                value = property_value(target)
                if value not in values.setdefault(feature, []):
                    values[feature].append(value)
        return [FeatureConfig(name, vals) for name, vals in values.items()]
