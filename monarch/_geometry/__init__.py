"""Geometry: extents and points, views (strided n-d arrays of ranks), slicing, selections and
splits, value meshes, and the slicing mixin every mesh shares. Imports nothing of monarch."""
