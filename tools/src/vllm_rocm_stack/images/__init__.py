"""The project's images built with buildah (no Docker engine): bake targets, stand-in bases, the build log."""
