"""Every process started for the agent (the bash tool, and through it skill scripts) runs here.

Layers: bwrap (namespaces), landlock (Landlock + seccomp where user namespaces are refused), off
(explicit only). See README "Security" and the modules for what each guarantees.
"""

from services.runtime.sandbox.core import Sandbox
from services.runtime.sandbox.probe import describe, export_metric, limits_from, probe_layer, select_sandbox
from services.runtime.sandbox.types import Layer, SandboxLimits, SandboxRequest, SandboxResult

__all__ = ["Layer", "Sandbox", "SandboxLimits", "SandboxRequest", "SandboxResult", "describe", "export_metric",
           "limits_from", "probe_layer", "select_sandbox"]
