"""The command line keras_train.py and torch_train.py share: the recipe train.sh gives all three
trainers (tj-trainer takes the same as its own flags)."""
import argparse


def recipe_parser():
    p = argparse.ArgumentParser()
    p.add_argument("model", help="a Keras model JSON")
    p.add_argument("data", help="an .npz of uint8 x_train, y_train, x_test, y_test")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--global-batch", type=int, default=64)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--cosine", action="store_true",
                   help="the learning rate a cosine decay to 0 over epochs x steps")
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--seed", type=int, default=1)
    return p
