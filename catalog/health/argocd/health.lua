-- Argo CD health check for Klutch's claims (every kind of anynines.com).
--
-- klutch-gitops copies the Control Plane's status into the App Cluster copy and writes the
-- top-level status.observedGeneration the catalog's XRDs declare (Crossplane merges them into the
-- claim CRD on 1.20 and 2.x): the App generation whose spec the Control Plane copy has taken in.
-- A Ready or Synced condition's observedGeneration is counted the same way, where the claim schema
-- declares the field (Crossplane 2); 1.20's conditions carry none. So, in order:
--   a top-level observedGeneration of another generation -> Progressing (as Flux reads it)
--   Synced False about this generation (or saying none) -> Degraded, with its message
--   Ready or Synced observed another generation         -> Progressing
--   Ready True                                          -> Healthy
--   anything else (no status yet, Ready False or Unknown) -> Progressing
-- Lua 5.1 without the string library, as Argo CD runs it.

local function first(...)
  for i = 1, select("#", ...) do
    local value = select(i, ...)
    if value ~= nil and value ~= "" then
      return value
    end
  end
  return nil
end

local hs = { status = "Progressing", message = "Waiting for the Control Plane to report status" }
local generation = obj.metadata.generation
local status = obj.status
if status == nil then
  return hs
end

local function stale(observed)
  return generation ~= nil and observed ~= nil and observed ~= generation
end

local ready, synced = nil, nil
if status.conditions ~= nil then
  for _, condition in ipairs(status.conditions) do
    if condition.type == "Ready" then
      ready = condition
    elseif condition.type == "Synced" then
      synced = condition
    end
  end
end

local waiting = "Waiting for the Control Plane to observe generation " .. tostring(generation)
if stale(status.observedGeneration) then
  hs.message = waiting
  return hs
end
if synced ~= nil and synced.status == "False" and not stale(synced.observedGeneration) then
  hs.status = "Degraded"
  hs.message = first(synced.message, synced.reason, "Synced is False")
  return hs
end
if (ready ~= nil and stale(ready.observedGeneration))
  or (synced ~= nil and stale(synced.observedGeneration)) then
  hs.message = waiting
  return hs
end
if ready ~= nil and ready.status == "True" then
  hs.status = "Healthy"
  hs.message = first(ready.message, ready.reason, "Ready")
  return hs
end
if ready ~= nil then
  hs.message = first(ready.message, ready.reason, hs.message)
end
return hs
