"""The compiled (numba) kernels, their decorator and cache, and warming them."""
