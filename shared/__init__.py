"""Code shared by the five Gamma harness services: contracts, bus, disk, settings."""
