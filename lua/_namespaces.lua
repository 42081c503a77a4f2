-- Namespaces' labels (docs/constraints.md, "Namespace selectors"): sc_sync_namespace writes
-- them (sync_namespace.lua), sc_read_namespaces reads them (read_namespaces.lua).
local NSLABELS = {}
