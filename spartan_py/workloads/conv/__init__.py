"""The ``conv_layers`` workload: convolution layers of AlexNet, VGG-16 and ResNet-18 as
im2col GEMMs with dense weights over sparse post-ReLU maps (generated or saved), forward or
a whole training step, on the Spartan machinery (:mod:`spartan_py.sparsity`)."""
