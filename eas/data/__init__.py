"""Datasets: the built-in ones (digits, Fashion-MNIST), CIFAR, npz files and image folders,
decoded once into a uint8 cache on disk and read a batch at a time, with a fixed
train/validation split."""

from eas.errors import UserError


class DataError(UserError):
    """A dataset that cannot be found or read."""
