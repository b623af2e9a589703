"""Datasets: the built-in ones (digits, Fashion-MNIST), CIFAR, npz files and image folders,
read into tensors with a fixed train/validation split."""
