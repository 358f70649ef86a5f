"""``python -m kamera.sweep --check | --manifest experiment=…`` (:func:`kamera.sweep.expand.main`)."""

import sys

from kamera.sweep.expand import main

sys.exit(main())
