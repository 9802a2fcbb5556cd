"""Model endpoints: provider registry, metered client, local model and tool adapter, metering proxy, prices."""
