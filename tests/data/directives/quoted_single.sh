#!/bin/bash
#RSA_DATA_IN='/gpfs/alice/my input'
